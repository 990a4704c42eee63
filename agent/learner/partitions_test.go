package learner

import (
	"testing"

	"github.com/sluice-dev/sluice/agent/entity"
	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

// Every partition of a request counts, not the first: the Java producer
// sends one Produce per broker with a batch for every partition it writes,
// so a governed partition may sit anywhere in it, beyond what a sample of
// the request's first bytes reaches.

const partitionsConfig = `
entities:
  clients:
    app: {producer_byte_rate: 50MiB}
  topic-partitions:
    orders-3: {producer_byte_rate: 2MiB, consumer_byte_rate: 3MiB}
    orders-5: {producer_byte_rate: 1MiB}
    audit-0:  {producer_byte_rate: 4MiB}
`

// sampleOf is the first bytes of a request, as the data path samples it.
func sampleOf(req []byte, n int) Sample {
	return Sample{Data: req[:min(n, len(req))], Whole: true}
}

func TestEveryPartitionCounts(t *testing.T) {
	policy := mustPolicy(t, partitionsConfig)
	names := names{ordersID: "orders"}
	big := func(tps ...kt.TP) []byte {
		return kt.Frame(kt.ProduceBatches(9, 1024, tps...), 1, kt.Str("app"))
	}
	cases := []struct {
		name string
		req  []byte
		want Target
	}{
		{"the governed partition of another topic after a batch the sample cannot pass",
			big(kt.TP{Topic: "events", Partitions: []int32{0}}, kt.TP{Topic: "orders", Partitions: []int32{3}}), topicPart("orders-5")},
		{"the governed partition of the same topic after a batch the sample cannot pass",
			big(kt.TP{Topic: "orders", Partitions: []int32{0, 3}}), topicPart("orders-5")},
		{"an ungoverned topic's unseen partitions are that topic's: the client's",
			big(kt.TP{Topic: "events", Partitions: []int32{0, 1, 2}}), client("app")},
		{"a request read whole: the strictest partition it names, wherever it is",
			kt.Frame(kt.Produce(9, kt.TP{Topic: "orders", Partitions: []int32{3, 5}}, kt.TP{Topic: "audit", Partitions: []int32{0}}), 1, kt.Str("app")),
			topicPart("orders-5")},
		{"the same in another order",
			kt.Frame(kt.Produce(9, kt.TP{Topic: "audit", Partitions: []int32{0}}, kt.TP{Topic: "orders", Partitions: []int32{5, 3}}), 1, kt.Str("app")),
			topicPart("orders-5")},
		{"topic IDs: the governed partition behind a batch (produce v13)",
			kt.Frame(kt.ProduceBatches(13, 1024, kt.TP{ID: ordersID, Partitions: []int32{0, 3}}), 1, kt.Str("app")), topicPart("orders-5")},
	}
	for i, c := range cases {
		l := New[int](policy, names)
		d, _, err := l.LearnSample(i, 1, sampleOf(c.req, 256))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if d.Produce != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, d.Produce, c.want)
		}
	}
}

// A producer keeps the strictest partition it was seen to write: requests
// for ungoverned partitions, sampled between its governed ones, never free
// it. A reload starts over; a fetch session's set is the broker's, so a
// consumer that leaves a governed partition leaves its limit.
func TestProducerHoldsTheStrictestPartition(t *testing.T) {
	policy := mustPolicy(t, partitionsConfig)
	l := New[int](policy, nil)
	produce := func(tps ...kt.TP) Target { return learn(t, l, 1, kt.Produce(9, tps...), "app").Produce }
	if got := produce(kt.TP{Topic: "orders", Partitions: []int32{3}}); got != topicPart("orders-3") {
		t.Fatalf("orders-3: %+v", got)
	}
	if got := produce(kt.TP{Topic: "events", Partitions: []int32{0}}); got != topicPart("orders-3") {
		t.Errorf("an ungoverned request freed the producer: %+v", got)
	}
	if got := produce(kt.TP{Topic: "audit", Partitions: []int32{0}}); got != topicPart("orders-3") {
		t.Errorf("a laxer partition took the producer: %+v", got)
	}
	if got := produce(kt.TP{Topic: "orders", Partitions: []int32{5}}); got != topicPart("orders-5") {
		t.Errorf("a stricter partition did not take the producer: %+v", got)
	}
	l.SetPolicy(mustPolicy(t, partitionsConfig))
	if got := produce(kt.TP{Topic: "events", Partitions: []int32{0}}); got != client("app") {
		t.Errorf("after a reload an ungoverned request is the client's: %+v", got)
	}
	// An adopted producer binding (a restarted agent) holds as well.
	l.Adopt(2, 1, Identity{}, Decision{Produce: topicPart("orders-3"), Decided: [2]bool{entity.Produce: true}})
	if got := learn(t, l, 2, kt.Produce(9, kt.TP{Topic: "events", Partitions: []int32{0}}), "app").Produce; got != topicPart("orders-3") {
		t.Errorf("an adopted producer was freed by an ungoverned request: %+v", got)
	}
	fetch := func(epoch int32, tps, forgotten []kt.TP) Target {
		return learn(t, l, 3, kt.Fetch(12, 9, epoch, tps, forgotten), "app").Fetch
	}
	if got := fetch(0, []kt.TP{{Topic: "orders", Partitions: []int32{3}}, {Topic: "events", Partitions: []int32{0}}}, nil); got != topicPart("orders-3") {
		t.Fatalf("fetch session with orders-3: %+v", got)
	}
	if got := fetch(1, nil, []kt.TP{{Topic: "orders", Partitions: []int32{3}}}); got != client("app") {
		t.Errorf("a consumer that forgot orders-3 is still held by it: %+v", got)
	}
}

// A topic ID the metadata does not know yet (an agent that just started)
// holds the request it is in to the strictest configured partition, and no
// more: once the name is known, an ungoverned topic is the client's.
func TestUnknownTopicIDPinsNothing(t *testing.T) {
	known := names{}
	l := New[int](mustPolicy(t, partitionsConfig), known)
	produce := func() Target {
		return learn(t, l, 1, kt.Produce(13, kt.TP{ID: ordersID, Partitions: []int32{0}}), "app").Produce
	}
	if got := produce(); got != topicPart("orders-5") {
		t.Fatalf("unknown ID: %+v, want the strictest partition", got)
	}
	known[ordersID] = "events"
	if got := produce(); got != client("app") {
		t.Errorf("the ID is now an ungoverned topic's, still held: %+v", got)
	}
}
