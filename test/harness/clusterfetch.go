package harness

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

// The data topic has no end for consumers: the harness stores none of its
// records, and answers its Fetch with copies of one canned record batch from
// whatever offset is asked, by the partition's leader only (NOT_LEADER
// elsewhere), with a high watermark far ahead. kfake keeps every other
// topic (the coordination topic) and its own offsets.
const (
	fetchRecordBytes = 16 << 10
	fetchRecords     = 8
	fetchHighMark    = 1 << 50
)

// cannedBatch is a v2 record batch of fetchRecords random values of
// fetchRecordBytes each, uncompressed, at offset 0.
func cannedBatch() []byte {
	rng := rand.New(rand.NewPCG(35, 5))
	values := make([][]byte, fetchRecords)
	for i := range values {
		values[i] = make([]byte, fetchRecordBytes)
		for j := range values[i] {
			values[i][j] = byte(rng.Uint32())
		}
	}
	return kafkatest.RecordBatch(values, 0)
}

// fetch answers a Fetch of the data topic alone; any other is kfake's.
func (w *ClusterWorld) fetch(req *kmsg.FetchRequest, node int32) (kmsg.Response, error, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(req.Topics) == 0 {
		return nil, nil, false
	}
	for i := range req.Topics {
		t := &req.Topics[i]
		if t.Topic != w.DataTopic && (t.Topic != "" || t.TopicID != w.dataID) {
			return nil, nil, false
		}
	}
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition = p.Partition
			if rp.ErrorCode = w.leaderError(p.Partition, node); rp.ErrorCode == 0 {
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = fetchHighMark, fetchHighMark, 0
				// Copies from the offset asked, as many as the partition's
				// share of the response takes (at least one, as a broker
				// always returns the first batch whole).
				room := min(int(p.PartitionMaxBytes), int(req.MaxBytes))
				offset := p.FetchOffset
				for first := true; first || len(rp.RecordBatches)+len(w.canned) <= room; first = false {
					at := len(rp.RecordBatches)
					rp.RecordBatches = append(rp.RecordBatches, w.canned...)
					binary.BigEndian.PutUint64(rp.RecordBatches[at:], uint64(offset))
					offset += fetchRecords
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil, true
}
