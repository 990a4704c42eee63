package learner

import (
	"testing"

	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

// BenchmarkLearn parses one sample and resolves its entity on a warm
// connection: a fetch v12 of three topics in a session, truncated to the
// 256 bytes the data path samples, with configured topic-partitions.
func BenchmarkLearn(b *testing.B) {
	policy := mustPolicy(b, precedenceConfig)
	l := New[int](policy, nil)
	full := kt.Frame(kt.Fetch(12, 77, 5, []kt.TP{
		{Topic: "plain-events", Partitions: []int32{0, 1, 2, 3}},
		{Topic: "broadcast-topic", Partitions: []int32{1, 4}},
		{Topic: "other", Partitions: []int32{9}},
	}, nil), 1, kt.Str("consumer-group-with-a-long-name"))
	sample := full[:min(len(full), 256)]
	if _, _, err := l.Learn(1, 1, sample); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		d, _, err := l.Learn(1, 1, sample)
		if err != nil || d.Fetch != topicPart("broadcast-topic-1") {
			b.Fatalf("%+v %v", d, err)
		}
	}
}
