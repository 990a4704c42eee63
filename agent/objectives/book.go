package objectives

import (
	"time"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/latency"
	"github.com/sluice-dev/sluice/maps"
)

// Request latency per entity and API, from the data path's measurements at
// the NIC (maps.LatencyEvent). A request is charged to the entity of its
// direction: a fetch to the connection's fetch entity, anything else to
// its produce entity. Fetch latency includes the broker's long-poll wait
// (fetch.max.wait.ms): it is time to first byte, not work done; produce
// latency is the signal to watch.
//
// Bounded as the other entity series are (series.go): entities with series
// of their own have theirs, every other entity's requests go to its
// direction's "<others>" series, so a client choosing new client-ids
// cannot grow the book.

// APIClass groups Kafka APIs as latency is reported.
type APIClass uint8

const (
	APIProduce APIClass = iota
	APIFetch
	APIOther
	numAPIClasses
)

func (c APIClass) String() string { return [...]string{"produce", "fetch", "other"}[c] }

func apiClassOf(key uint16) APIClass {
	switch key {
	case 0:
		return APIProduce
	case 1:
		return APIFetch
	}
	return APIOther
}

// LatencyBuckets are the exported histograms' upper bounds, in seconds:
// the internal buckets (latency package, 12 % wide) are too many for a
// Prometheus series each.
var LatencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// othersEntity keys the "<others>" series of a direction in the book.
const othersEntity = ^entity.ID(0)

// OthersType and OthersName label the aggregate of a direction's entities
// without series of their own (their latency series here, their counters
// in the agent's metrics); no entity has that type.
const (
	OthersType = "unconfigured"
	OthersName = "<others>"
)

type latencyKey struct {
	dir entity.Direction
	id  entity.ID
	api APIClass
}

// latencyHistogram is a cumulative Prometheus histogram.
type latencyHistogram struct {
	counts []uint64 // per LatencyBuckets bound, not cumulative; the last is +Inf
	sum    float64  // seconds
	count  uint64
}

func (h *latencyHistogram) observe(d time.Duration) {
	if h.counts == nil {
		h.counts = make([]uint64, len(LatencyBuckets)+1)
	}
	s := d.Seconds()
	i := 0
	for i < len(LatencyBuckets) && s > LatencyBuckets[i] {
		i++
	}
	h.counts[i]++
	h.sum += s
	h.count++
}

// latencySeries is one entity × API: the sliding window status reads, and
// the histograms /metrics exports (from the request's last byte, the
// broker's time; and, for produce, from its first byte, which adds the
// request's own transfer). A fetch series also keeps, in withData, only the fetches
// that returned data: what a fetch objective judges.
type latencySeries struct {
	window          latency.Window // from the last byte
	withData        latency.Window // fetches only: those that returned data
	fromLast, first latencyHistogram
}

// Fetch responses that return nothing (an idle consumer's long poll,
// answered after fetch.max.wait.ms) list at most the partitions their
// request asked for, each in about as many bytes as the request spent on
// it (37 against 33 at version 12), while records come in batches of 61
// bytes of header and more. So a response within emptyFetchGrowth of
// its request, plus emptyFetchSlack for the envelope, returned no data;
// one beyond carried at least a batch. Incremental fetch sessions (every
// client since Kafka 1.1) list no idle partition at all, so there the
// margin is wide; a full fetch over very many partitions that returns
// one small batch can read as empty (a sample lost, never a long poll
// judged).
const (
	emptyFetchGrowth = 1.25
	emptyFetchSlack  = 16
)

// returnedData says whether a measured fetch returned data, from its
// request's and response's Kafka size fields (the bytes after the 4-byte
// size). Without sizes every fetch counts, long polls included: no Kafka
// message is 0 bytes, so 0 is a size the data path did not know (a
// request an earlier data path made pending, before an upgrade).
func returnedData(ev maps.LatencyEvent) bool {
	if ev.RequestSize == 0 || ev.ResponseSize == 0 {
		return true
	}
	return float64(ev.ResponseSize) > emptyFetchGrowth*float64(ev.RequestSize)+emptyFetchSlack
}

// book is the latency series of every entity with series of its own and
// of each direction's others.
type book struct {
	series map[latencyKey]*latencySeries
	// Measurements not charged: a request whose last byte the data path
	// did not see still counts from its first; one with an absurd value
	// (a response before its request) is dropped and counted.
	dropped uint64
}

func newBook() *book { return &book{series: map[latencyKey]*latencySeries{}} }

// observe charges one measurement, at now, to id's series (or its
// direction's others when own is false).
func (b *book) observe(now time.Time, dir entity.Direction, id entity.ID, own bool, ev maps.LatencyEvent) {
	fromFirst := ev.FromFirstByte()
	if fromFirst < 0 || fromFirst > 2*latency.MaxLatency {
		b.dropped++
		return
	}
	if !own {
		id = othersEntity
	}
	k := latencyKey{dir: dir, id: id, api: apiClassOf(ev.APIKey)}
	s := b.series[k]
	if s == nil {
		s = &latencySeries{}
		b.series[k] = s
	}
	// From the first byte differs from the last only for requests that
	// span segments: produce. Fetches and the rest are a segment or so, so
	// their first-byte histograms repeated the last-byte ones, 42 series
	// an entity for nothing.
	if k.api == APIProduce {
		s.first.observe(fromFirst)
	}
	if fromLast, ok := ev.FromLastByte(); ok {
		s.fromLast.observe(fromLast)
		s.window.Observe(now, fromLast)
		if k.api == APIFetch && returnedData(ev) {
			s.withData.Observe(now, fromLast)
		}
	}
}

// forget drops an entity's series (its id is being reused).
func (b *book) forget(id entity.ID) {
	for k := range b.series {
		if k.id == id {
			delete(b.series, k)
		}
	}
}

// quantiles answers id's latency per API at now (nil when none was
// measured in the last minute).
func (b *book) quantiles(now time.Time, dir entity.Direction, id entity.ID) []status.LatencyView {
	var out []status.LatencyView
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for api := APIProduce; api < numAPIClasses; api++ {
		s := b.series[latencyKey{dir: dir, id: id, api: api}]
		if s == nil {
			continue
		}
		v := status.LatencyView{API: api.String()}
		p50, n := s.window.Quantile(now, 10*time.Second, 0.5)
		p99, _ := s.window.Quantile(now, 10*time.Second, 0.99)
		p50m, nm := s.window.Quantile(now, time.Minute, 0.5)
		p99m, _ := s.window.Quantile(now, time.Minute, 0.99)
		v.P50Millis, v.P99Millis, v.Requests = ms(p50), ms(p99), n
		v.P50MinuteMillis, v.P99MinuteMillis, v.RequestsMinute = ms(p50m), ms(p99m), nm
		if nm > 0 {
			out = append(out, v)
		}
	}
	return out
}

// Histogram is one exported latency series: cumulative counts at each
// LatencyBuckets bound, then +Inf.
type Histogram struct {
	Direction, EntityType, Entity, API string
	// FromFirstByte: measured from the request's first byte (else its last).
	FromFirstByte bool
	Cumulative    []uint64
	Sum           float64
	Count         uint64
}

// histograms lists every latency series, named through entities.
func (b *book) histograms(entities Entities) []Histogram {
	var out []Histogram
	for k, s := range b.series {
		typ, name := OthersType, OthersName
		switch {
		case k.id == othersEntity:
		case k.id == entity.UnknownID:
			typ, name = "unknown", ""
		default:
			key, ok := entities.Key(k.id)
			if !ok {
				continue // released; its series goes with it (forget)
			}
			typ, name = key.Kind.String(), key.Name
		}
		for _, h := range []struct {
			first bool
			h     *latencyHistogram
		}{{false, &s.fromLast}, {true, &s.first}} {
			if h.h.count == 0 {
				continue
			}
			cum := make([]uint64, len(h.h.counts))
			var run uint64
			for i, c := range h.h.counts {
				run += c
				cum[i] = run
			}
			out = append(out, Histogram{Direction: k.dir.String(), EntityType: typ, Entity: name, API: k.api.String(),
				FromFirstByte: h.first, Cumulative: cum, Sum: h.h.sum, Count: h.h.count})
		}
	}
	return out
}
