package kafkatest

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// RecordBatch encodes values as one v2 record batch (magic 2,
// uncompressed, null keys, no headers, at offset 0), with its length and
// CRC-32C as a broker checks them: the one encoder the tests, the load
// generators and the cluster harness share.
func RecordBatch(values [][]byte, timestamp int64) []byte {
	var records []byte
	for i, v := range values {
		var body []byte
		body = append(body, 0)                          // attributes
		body = binary.AppendVarint(body, 0)             // timestamp delta
		body = binary.AppendVarint(body, int64(i))      // offset delta
		body = binary.AppendVarint(body, -1)            // null key
		body = binary.AppendVarint(body, int64(len(v))) // value length
		body = append(body, v...)
		body = binary.AppendVarint(body, 0) // no headers
		records = binary.AppendVarint(records, int64(len(body)))
		records = append(records, body...)
	}
	b := kmsg.RecordBatch{
		FirstOffset: 0, PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(len(values) - 1),
		FirstTimestamp: timestamp, MaxTimestamp: timestamp,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(len(values)), Records: records,
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:12], uint32(len(out)-12)) // length: what follows it
	// The CRC-32C covers attributes (offset 21) to the end.
	binary.BigEndian.PutUint32(out[17:21], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}
