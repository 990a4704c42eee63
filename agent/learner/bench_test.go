package learner

import (
	"fmt"
	"testing"

	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

// BenchmarkLearn parses one sample and resolves its entity on a warm
// connection: an incremental fetch v12 of three topics in a session its
// full request opened, truncated to the 256 bytes the data path samples,
// with configured topic-partitions. The sample ends inside its second
// topic, so the topics it hides hold the connection to the strictest
// configured partition for Fetch, broadcast-topic-1 (150MiB), which the
// session's set names as well.
func BenchmarkLearn(b *testing.B) {
	policy := mustPolicy(b, precedenceConfig)
	l := New[int](policy, nil)
	topics := []kt.TP{
		{Topic: "plain-events", Partitions: []int32{0, 1, 2, 3}},
		{Topic: "broadcast-topic", Partitions: []int32{1, 4}},
		{Topic: "other", Partitions: []int32{9}},
	}
	clientID := kt.Str("consumer-group-with-a-long-name")
	if _, _, err := l.Learn(1, 1, kt.Frame(kt.Fetch(12, 77, 0, topics, nil), 1, clientID)); err != nil {
		b.Fatal(err)
	}
	full := kt.Frame(kt.Fetch(12, 77, 5, topics, nil), 2, clientID)
	sample := full[:min(len(full), 256)]
	if d, _, err := l.Learn(1, 1, sample); err != nil || d.Fetch != topicPart("broadcast-topic-1") {
		b.Fatalf("%+v %v", d, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		d, _, err := l.Learn(1, 1, sample)
		if err != nil || d.Fetch != topicPart("broadcast-topic-1") {
			b.Fatalf("%+v %v", d, err)
		}
	}
}

// hostileSessionSizes are the fetch session sizes BenchmarkLearnHostileSession
// and TestSessionSampleCostIsFlat compare: a consumer's, the cap, and what a
// hostile client grows (past the cap: the session overflows).
var hostileSessionSizes = []int{10, sessionCap, 100_000}

// openHostileSession opens a fetch session on connection c and grows it to
// n partitions through incremental requests, as a hostile client does:
// broadcast-topic-0 (configured in precedenceConfig), then topics t0, t1,
// … of up to 100 partitions each. It returns the sample the benchmark
// repeats: an incremental request listing one partition of the set (its
// fetch offset moved), as a consumer sends.
func openHostileSession(tb testing.TB, l *Learner[int], c, n int) []byte {
	tb.Helper()
	learn := func(epoch int32, tps []kt.TP) {
		tb.Helper()
		if _, _, err := l.Learn(c, 1, kt.Frame(kt.Fetch(12, 77, epoch, tps, nil), 1, kt.Str("hostile"))); err != nil {
			tb.Fatal(err)
		}
	}
	learn(0, []kt.TP{{Topic: "broadcast-topic", Partitions: []int32{0}}})
	epoch, topic := int32(1), 0
	for added := 1; added < n; epoch++ {
		var tps []kt.TP
		for ; len(tps) < 10 && added < n; topic++ {
			parts := make([]int32, 0, 100)
			for p := int32(0); p < 100 && added < n; p++ {
				parts = append(parts, p)
				added++
			}
			tps = append(tps, kt.TP{Topic: fmt.Sprint("t", topic), Partitions: parts})
		}
		learn(epoch, tps)
	}
	return kt.Frame(kt.Fetch(12, 77, epoch, []kt.TP{{Topic: "t0", Partitions: []int32{0}}}, nil), 1, kt.Str("hostile"))
}

// BenchmarkLearnHostileSession is the cost of one incremental Fetch sample
// on a connection whose fetch session holds 10 partitions, the cap, or
// 100,000 (the session overflowed): it must not grow with the set.
func BenchmarkLearnHostileSession(b *testing.B) {
	for _, n := range hostileSessionSizes {
		b.Run(fmt.Sprint("partitions=", n), func(b *testing.B) {
			l := New[int](mustPolicy(b, precedenceConfig), nil)
			sample := openHostileSession(b, l, 1, n)
			// The set names broadcast-topic-0; an overflowed session is
			// held to the strictest of any topic.
			want := topicPart("broadcast-topic-0")
			if n > sessionCap {
				want = topicPart("broadcast-topic-1")
			}
			b.ReportAllocs()
			for b.Loop() {
				d, _, err := l.Learn(1, 1, sample)
				if err != nil || d.Fetch != want {
					b.Fatalf("%+v %v", d, err)
				}
			}
		})
	}
}
