package main

import (
	"bytes"
	"hash/crc32"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The hand-built record batch is what Kafka expects: kmsg reads it back
// with its length, CRC-32C and records intact.
func TestRecordBatchDecodes(t *testing.T) {
	values := [][]byte{[]byte("alpha"), bytes.Repeat([]byte{7}, 300)}
	raw := recordBatch(values, 1700000000000)
	var b kmsg.RecordBatch
	if err := b.ReadFrom(raw); err != nil {
		t.Fatal(err)
	}
	if int(b.Length) != len(raw)-12 || b.Magic != 2 || b.NumRecords != 2 || b.LastOffsetDelta != 1 {
		t.Fatalf("batch header %+v", b)
	}
	if got := crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)); uint32(b.CRC) != got {
		t.Errorf("crc %x, want %x", uint32(b.CRC), got)
	}
	rest := b.Records
	for i, want := range values {
		var r kmsg.Record
		if err := r.ReadFrom(rest); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !bytes.Equal(r.Value, want) || r.OffsetDelta != int32(i) || r.Key != nil {
			t.Errorf("record %d: %+v", i, r)
		}
		n := len(r.AppendTo(nil))
		rest = rest[n:]
	}
}
