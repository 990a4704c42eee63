package kafka

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

var frame = kafkatest.Frame

var str = kafkatest.Str

func topicID(b byte) [16]byte { return [16]byte{b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, b} }

func produceRequest(version int16) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	req.Acks = -1
	req.TimeoutMillis = 30000
	for i, name := range []string{"orders", "payments"} {
		t := kmsg.NewProduceRequestTopic()
		t.Topic = name
		t.TopicID = topicID(byte(i + 1))
		for _, p := range []int32{int32(3 * i), int32(3*i + 2)} {
			part := kmsg.NewProduceRequestTopicPartition()
			part.Partition = p
			part.Records = bytes.Repeat([]byte{byte(p)}, 100+int(p))
			t.Partitions = append(t.Partitions, part)
		}
		req.Topics = append(req.Topics, t)
	}
	return req
}

func fetchRequest(version int16, replicaID int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(version)
	req.ReplicaID = replicaID
	if version >= 15 && replicaID >= 0 {
		req.ReplicaState.ID = replicaID
		req.ReplicaState.Epoch = 7
	}
	req.SessionID = 42
	req.SessionEpoch = 3
	for i, name := range []string{"clicks", "views"} {
		t := kmsg.NewFetchRequestTopic()
		t.Topic = name
		t.TopicID = topicID(byte(10 + i))
		for _, p := range []int32{int32(i), int32(i + 5)} {
			part := kmsg.NewFetchRequestTopicPartition()
			part.Partition = p
			part.FetchOffset = 1000
			t.Partitions = append(t.Partitions, part)
		}
		req.Topics = append(req.Topics, t)
	}
	ft := kmsg.NewFetchRequestForgottenTopic()
	ft.Topic = "old"
	ft.TopicID = topicID(99)
	ft.Partitions = []int32{4, 8}
	req.ForgottenTopics = append(req.ForgottenTopics, ft)
	req.Rack = "rack-a"
	return req
}

// oracle parses a complete frame with kmsg itself and reduces it to what
// the walker reports.
func oracle(t *testing.T, sample []byte) (topics, forgotten []TopicPartitions, replica, session, epoch int32) {
	t.Helper()
	var r kbin.Reader
	r.Src = sample[4:]
	key, version := r.Int16(), r.Int16()
	r.Int32()
	r.NullableString()
	req := kmsg.RequestForKey(key)
	req.SetVersion(version)
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if err := req.ReadFrom(r.Src); err != nil {
		t.Fatalf("kmsg cannot read its own request: %v", err)
	}
	replica = -1
	switch req := req.(type) {
	case *kmsg.ProduceRequest:
		for _, tp := range req.Topics {
			e := TopicPartitions{Name: tp.Topic, ID: tp.TopicID}
			if version >= produceTopicIDsFrom {
				e.Name = ""
			} else {
				e.ID = [16]byte{}
			}
			for _, p := range tp.Partitions {
				e.Partitions = append(e.Partitions, p.Partition)
			}
			topics = append(topics, e)
		}
	case *kmsg.FetchRequest:
		convert := func(name string, id [16]byte, parts []int32) TopicPartitions {
			if version >= fetchTopicIDsFrom {
				return TopicPartitions{ID: id, Partitions: parts}
			}
			return TopicPartitions{Name: name, Partitions: parts}
		}
		for _, tp := range req.Topics {
			var parts []int32
			for _, p := range tp.Partitions {
				parts = append(parts, p.Partition)
			}
			topics = append(topics, convert(tp.Topic, tp.TopicID, parts))
		}
		for _, tp := range req.ForgottenTopics {
			forgotten = append(forgotten, convert(tp.Topic, tp.TopicID, append([]int32(nil), tp.Partitions...)))
		}
		replica = req.ReplicaID
		if version >= fetchReplicaStateFrom {
			replica = req.ReplicaState.ID
		}
		session, epoch = req.SessionID, req.SessionEpoch
	}
	return
}

func checkAgainstOracle(t *testing.T, name string, sample []byte) {
	t.Helper()
	p := NewParser()
	var r Request
	if err := p.Parse(sample, &r); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if r.Truncated {
		t.Fatalf("%s: complete request reported truncated", name)
	}
	topics, forgotten, replica, session, epoch := oracle(t, sample)
	if !reflect.DeepEqual(nonEmpty(r.Topics), nonEmpty(topics)) {
		t.Errorf("%s: topics %+v, kmsg says %+v", name, r.Topics, topics)
	}
	if !reflect.DeepEqual(nonEmpty(r.Forgotten), nonEmpty(forgotten)) {
		t.Errorf("%s: forgotten %+v, kmsg says %+v", name, r.Forgotten, forgotten)
	}
	if r.ReplicaID != replica || r.SessionID != session || r.SessionEpoch != epoch {
		t.Errorf("%s: replica %d session %d epoch %d, kmsg says %d %d %d", name, r.ReplicaID, r.SessionID, r.SessionEpoch, replica, session, epoch)
	}
}

func nonEmpty(l []TopicPartitions) []TopicPartitions {
	if len(l) == 0 {
		return nil
	}
	return l
}

func TestParseProduceEveryVersion(t *testing.T) {
	for v := int16(3); v <= (&kmsg.ProduceRequest{}).MaxVersion(); v++ {
		sample := frame(produceRequest(v), 17, str("orders-service"))
		checkAgainstOracle(t, fmt.Sprintf("produce v%d", v), sample)
		var r Request
		if err := NewParser().Parse(sample, &r); err != nil || r.ClientID != "orders-service" || r.CorrelationID != 17 || r.APIKey != KeyProduce || r.Version != v {
			t.Errorf("produce v%d header: %+v %v", v, r, err)
		}
	}
}

func TestParseFetchEveryVersion(t *testing.T) {
	for v := int16(4); v <= (&kmsg.FetchRequest{}).MaxVersion(); v++ {
		sample := frame(fetchRequest(v, -1), 9, str("analytics"))
		checkAgainstOracle(t, fmt.Sprintf("fetch v%d", v), sample)
		var r Request
		if err := NewParser().Parse(sample, &r); err != nil || r.IsFollowerFetch() {
			t.Errorf("consumer fetch v%d taken for a follower (%v)", v, err)
		}
	}
}

func shareFetchRequest(version int16) *kmsg.ShareFetchRequest {
	return kafkatest.ShareFetch(version, 4, kafkatest.TP{ID: topicID(20), Partitions: []int32{0, 2}}, kafkatest.TP{ID: topicID(21), Partitions: []int32{1}})
}

// A share group's fetch (KIP-932) names its topics by ID, past each
// partition's acknowledgements, in every version this build knows.
func TestParseShareFetchEveryVersion(t *testing.T) {
	for v := int16(0); v <= (&kmsg.ShareFetchRequest{}).MaxVersion(); v++ {
		req := shareFetchRequest(v)
		sample := frame(req, 5, str("share-consumer"))
		var r Request
		if err := NewParser().Parse(sample, &r); err != nil || r.Truncated || r.APIKey != KeyShareFetch || r.ClientID != "share-consumer" {
			t.Fatalf("share fetch v%d: %+v %v", v, r, err)
		}
		var want []TopicPartitions
		for _, tp := range req.Topics {
			entry := TopicPartitions{ID: tp.TopicID}
			for _, p := range tp.Partitions {
				entry.Partitions = append(entry.Partitions, p.Partition)
			}
			want = append(want, entry)
		}
		if !reflect.DeepEqual(r.Topics, want) || r.SessionEpoch != 4 {
			t.Errorf("share fetch v%d: topics %+v epoch %d, want %+v epoch 4", v, r.Topics, r.SessionEpoch, want)
		}
	}
}

func TestParseFollowerFetchEveryVersion(t *testing.T) {
	for v := int16(0); v <= (&kmsg.FetchRequest{}).MaxVersion(); v++ {
		// A client-id that gives nothing away: the body must tell.
		sample := frame(fetchRequest(v, 2), 1, str("replica"))
		checkAgainstOracle(t, fmt.Sprintf("follower fetch v%d", v), sample)
		var r Request
		if err := NewParser().Parse(sample, &r); err != nil || !r.IsFollowerFetch() || r.ReplicaID != 2 {
			t.Errorf("follower fetch v%d: replica %d follower %v (%v)", v, r.ReplicaID, r.IsFollowerFetch(), err)
		}
	}
}

func TestParseBrokerFetcherClientIDHint(t *testing.T) {
	for id, want := range map[string]bool{
		"broker-1-fetcher-0": true, "broker-12-fetcher-3": true,
		"broker-x-fetcher-0": false, "broker-1-fetcher-": false, "my-broker-1-fetcher-0": false, "": false,
	} {
		if got := IsBrokerFetcherClientID(id); got != want {
			t.Errorf("%q: %v, want %v", id, got, want)
		}
	}
	// A truncated v15+ follower fetch whose tagged fields are cut off still
	// shows as a follower by its client-id.
	sample := frame(fetchRequest(16, 1), 1, str("broker-1-fetcher-0"))[:60]
	var r Request
	if err := NewParser().Parse(sample, &r); err != nil || !r.Truncated || !r.IsFollowerFetch() {
		t.Errorf("truncated follower: %+v %v", r, err)
	}
}

// Every prefix of every request parses without panic: no error (a prefix is
// truncation, not malformation), Truncated set, and what it reached is a
// prefix of the full parse.
func TestParseEveryPrefixReportsTruncation(t *testing.T) {
	var samples [][]byte
	for v := int16(3); v <= 13; v++ {
		samples = append(samples, frame(produceRequest(v), 1, str("p")))
	}
	for v := int16(0); v <= 18; v++ {
		samples = append(samples, frame(fetchRequest(v, -1), 1, str("c")), frame(fetchRequest(v, 3), 1, nil))
	}
	for v := int16(0); v <= (&kmsg.ShareFetchRequest{}).MaxVersion(); v++ {
		samples = append(samples, frame(shareFetchRequest(v), 1, str("s")))
	}
	p := NewParser()
	var full, part Request
	for _, sample := range samples {
		if err := p.Parse(sample, &full); err != nil {
			t.Fatal(err)
		}
		fullTopics := clone(full.Topics)
		for n := 0; n < len(sample); n++ {
			if err := p.Parse(sample[:n], &part); err != nil {
				t.Fatalf("prefix %d/%d: %v", n, len(sample), err)
			}
			if !part.Truncated {
				t.Fatalf("prefix %d/%d of key %d v%d not reported truncated", n, len(sample), full.APIKey, full.Version)
			}
			if !isPrefix(part.Topics, fullTopics) {
				t.Fatalf("prefix %d: topics %+v are not a prefix of %+v", n, part.Topics, fullTopics)
			}
		}
	}
}

func clone(l []TopicPartitions) []TopicPartitions {
	out := make([]TopicPartitions, len(l))
	for i, tp := range l {
		out[i] = TopicPartitions{Name: tp.Name, ID: tp.ID, Partitions: append([]int32(nil), tp.Partitions...)}
	}
	return out
}

func isPrefix(part, full []TopicPartitions) bool {
	if len(part) > len(full) {
		return false
	}
	for i, tp := range part {
		f := full[i]
		if tp.Name != f.Name || tp.ID != f.ID || len(tp.Partitions) > len(f.Partitions) {
			return false
		}
		for j := range tp.Partitions {
			if tp.Partitions[j] != f.Partitions[j] {
				return false
			}
		}
		if i < len(part)-1 && len(tp.Partitions) != len(f.Partitions) {
			return false
		}
	}
	return true
}

func TestParseRejectsMalformedAndUnknown(t *testing.T) {
	good := frame(produceRequest(9), 1, str("x"))
	cases := map[string]struct {
		sample []byte
		want   error
	}{
		"size too small":        {[]byte{0, 0, 0, 4, 0, 0, 0, 0}, ErrMalformed},
		"size negative":         {[]byte{0xff, 0xff, 0xff, 0xff, 0, 0}, ErrMalformed},
		"size above 100 MiB":    {[]byte{0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}, ErrMalformed},
		"unknown api key":       {frameRaw(kbin.AppendInt16(nil, 999), 0), ErrUnknownAPI},
		"negative api key":      {frameRaw(kbin.AppendInt16(nil, -3), 0), ErrUnknownAPI},
		"future produce":        {frameRaw(kbin.AppendInt16(nil, 0), 99), ErrUnknownAPI},
		"complete but cut body": {withSize(good[:len(good)-10]), ErrMalformed},
		"negative topic count":  {frameRaw(kbin.AppendInt16(nil, 0), 3, 0xff, 0xff /*txn null*/, 0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xfe), ErrMalformed},
	}
	for name, c := range cases {
		var r Request
		err := NewParser().Parse(c.sample, &r)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// frameRaw builds a request with a v1 header (client-id null) and raw body bytes.
func frameRaw(key []byte, version int16, body ...byte) []byte {
	b := append(key, kbin.AppendInt16(nil, version)...)
	b = kbin.AppendInt32(b, 1)
	b = kbin.AppendInt16(b, -1)
	b = append(b, body...)
	return append(kbin.AppendInt32(nil, int32(len(b))), b...)
}

// withSize rewrites a cut frame's size so that it claims to be complete.
func withSize(sample []byte) []byte {
	out := kbin.AppendInt32(nil, int32(len(sample)-4))
	return append(out, sample[4:]...)
}

func TestParseKeepsHeaderOfOtherAPIs(t *testing.T) {
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	req.ClientSoftwareName = "franz-go"
	req.ClientSoftwareVersion = "1.22"
	var r Request
	if err := NewParser().Parse(frame(req, 0, str("core-group")), &r); err != nil || r.ClientID != "core-group" || r.APIKey != KeyApiVersions {
		t.Errorf("ApiVersions: %+v %v", r, err)
	}
}

func TestParseWarmAllocatesNothing(t *testing.T) {
	sample := frame(fetchRequest(12, -1), 1, str("analytics"))
	p := NewParser()
	var r Request
	_ = p.Parse(sample, &r)
	allocs := testing.AllocsPerRun(100, func() { _ = p.Parse(sample, &r) })
	if allocs != 0 {
		t.Errorf("warm parse allocates %v times", allocs)
	}
}
