package kafkatest

import (
	"bytes"
	"hash/crc32"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The record batch is what Kafka expects: kmsg reads it back with its
// length, CRC-32C, timestamps and records intact.
func TestRecordBatchDecodes(t *testing.T) {
	values := [][]byte{[]byte("alpha"), bytes.Repeat([]byte{7}, 300), {}}
	raw := RecordBatch(values, 1700000000000)
	var b kmsg.RecordBatch
	if err := b.ReadFrom(raw); err != nil {
		t.Fatal(err)
	}
	if int(b.Length) != len(raw)-12 || b.Magic != 2 || b.NumRecords != 3 || b.LastOffsetDelta != 2 ||
		b.FirstTimestamp != 1700000000000 || b.MaxTimestamp != 1700000000000 || b.ProducerID != -1 || b.PartitionLeaderEpoch != -1 {
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
		rest = rest[len(r.AppendTo(nil)):]
	}
	if len(rest) != 0 {
		t.Errorf("%d bytes after the last record", len(rest))
	}
}
