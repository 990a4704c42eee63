// Package kafkatest builds Kafka request bytes for tests, as clients send
// them on the wire.
package kafkatest

import (
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Frame encodes req as a client does: size, request header (v1, or v2 for
// flexible versions, with no header tags), body.
func Frame(req kmsg.Request, correlationID int32, clientID *string) []byte {
	var body []byte
	body = kbin.AppendInt16(body, req.Key())
	body = kbin.AppendInt16(body, req.GetVersion())
	body = kbin.AppendInt32(body, correlationID)
	body = kbin.AppendNullableString(body, clientID)
	if req.IsFlexible() {
		body = append(body, 0)
	}
	body = req.AppendTo(body)
	return append(kbin.AppendInt32(nil, int32(len(body))), body...)
}

// Str returns a pointer to s, for nullable strings.
func Str(s string) *string { return &s }

// TP names a topic's partitions for the request builders.
type TP struct {
	Topic      string
	ID         [16]byte
	Partitions []int32
}

// Produce builds a Produce request of a version with small record batches.
func Produce(version int16, topics ...TP) *kmsg.ProduceRequest {
	return ProduceBatches(version, 64, topics...)
}

// ProduceBatches builds a Produce request whose record batches are
// batchBytes long each: a sample of its first bytes ends inside the first.
func ProduceBatches(version int16, batchBytes int, topics ...TP) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	req.Acks = -1
	req.TimeoutMillis = 30000
	for _, tp := range topics {
		t := kmsg.NewProduceRequestTopic()
		t.Topic, t.TopicID = tp.Topic, tp.ID
		for _, p := range tp.Partitions {
			part := kmsg.NewProduceRequestTopicPartition()
			part.Partition = p
			part.Records = make([]byte, batchBytes)
			t.Partitions = append(t.Partitions, part)
		}
		req.Topics = append(req.Topics, t)
	}
	return req
}

// Fetch builds a consumer Fetch request of a version in a session (id,
// epoch), listing topics and forgetting forgotten.
func Fetch(version int16, sessionID, epoch int32, topics []TP, forgotten []TP) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(version)
	req.ReplicaID = -1
	req.SessionID, req.SessionEpoch = sessionID, epoch
	for _, tp := range topics {
		t := kmsg.NewFetchRequestTopic()
		t.Topic, t.TopicID = tp.Topic, tp.ID
		for _, p := range tp.Partitions {
			part := kmsg.NewFetchRequestTopicPartition()
			part.Partition = p
			t.Partitions = append(t.Partitions, part)
		}
		req.Topics = append(req.Topics, t)
	}
	for _, tp := range forgotten {
		f := kmsg.NewFetchRequestForgottenTopic()
		f.Topic, f.TopicID = tp.Topic, tp.ID
		f.Partitions = tp.Partitions
		req.ForgottenTopics = append(req.ForgottenTopics, f)
	}
	return req
}

// ShareFetch builds a share group's ShareFetch request (KIP-932) of a
// version at a share session epoch, listing topics by ID, each partition
// with an acknowledgement batch as a share consumer sends after its first
// records.
func ShareFetch(version int16, epoch int32, topics ...TP) *kmsg.ShareFetchRequest {
	req := kmsg.NewPtrShareFetchRequest()
	req.SetVersion(version)
	req.GroupID, req.MemberID = Str("share-group"), Str("member-1")
	req.ShareSessionEpoch = epoch
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.MaxRecords, req.BatchSize = 500, 1, 50<<20, 500, 500
	for _, tp := range topics {
		t := kmsg.NewShareFetchRequestTopic()
		t.TopicID = tp.ID
		for _, p := range tp.Partitions {
			part := kmsg.NewShareFetchRequestTopicPartition()
			part.Partition = p
			ack := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
			ack.FirstOffset, ack.LastOffset, ack.AcknowledgeTypes = 10, 19, []int8{1}
			part.AcknowledgementBatches = append(part.AcknowledgementBatches, ack)
			t.Partitions = append(t.Partitions, part)
		}
		req.Topics = append(req.Topics, t)
	}
	return req
}
