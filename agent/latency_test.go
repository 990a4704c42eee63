package agent

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/maps"
)

// measured is a latency event of api for the connection bound to (produce,
// fetch), answered d after its last byte (which came 1 ms after its first).
func measured(bound [2]uint32, api uint16, d time.Duration) maps.LatencyEvent {
	first := 10 * time.Second
	return maps.LatencyEvent{Bound: bound, APIKey: api, FirstByte: first, LastByte: first + time.Millisecond, Response: first + time.Millisecond + d}
}

func latencyOf(views []status.LatencyView, api string) (status.LatencyView, bool) {
	for _, v := range views {
		if v.API == api {
			return v, true
		}
	}
	return status.LatencyView{}, false
}

// A configured entity's produce and fetch latencies land in its status,
// by the entity of each request's direction, with quantiles over 10 s and a
// minute; an unconfigured entity's go to its direction's <others>; an
// absurd measurement (a response before its request) is dropped (core's
// produce requests count 100, not 101; objectives/book_test.go counts the
// drop).
func TestLatencyByEntityAndAPI(t *testing.T) {
	r := newRig(t, "entities: {clients: {core: {producer_byte_reservation: 100}}}\n")
	core := r.learn(46000, "core", apiVersions())
	stranger := r.learn(46001, "stranger", apiVersions())
	r.cycle()
	for i := 1; i <= 100; i++ {
		r.a.ObserveLatency(measured([2]uint32{core.Produce, core.Fetch}, 0, time.Duration(i)*time.Millisecond))
	}
	r.a.ObserveLatency(measured([2]uint32{core.Produce, core.Fetch}, 1, 500*time.Millisecond)) // a fetch's long poll
	r.a.ObserveLatency(measured([2]uint32{stranger.Produce, stranger.Fetch}, 0, 7*time.Millisecond))
	bad := measured([2]uint32{core.Produce, core.Fetch}, 0, time.Millisecond)
	bad.Response = bad.FirstByte - time.Second
	r.a.ObserveLatency(bad)
	s := r.cycle()

	produce, ok := latencyOf(entityView(s, entity.Produce, "core").Latency, "produce")
	if !ok || produce.Requests != 100 || produce.RequestsMinute != 100 {
		t.Fatalf("core's produce latency: %+v, want 100 requests", entityView(s, entity.Produce, "core").Latency)
	}
	// Buckets are 12 % wide: the quantiles are within that of 50 and 99 ms.
	if math.Abs(produce.P50Millis-50)/50 > 0.13 || math.Abs(produce.P99Millis-99)/99 > 0.13 {
		t.Errorf("core's produce p50 %.1f ms, p99 %.1f ms: want about 50 and 99", produce.P50Millis, produce.P99Millis)
	}
	if fetch, ok := latencyOf(entityView(s, entity.Fetch, "core").Latency, "fetch"); !ok || fetch.Requests != 1 || math.Abs(fetch.P99Millis-500)/500 > 0.13 {
		t.Errorf("core's fetch latency under fetch: %+v", fetch)
	}
	if _, ok := latencyOf(entityView(s, entity.Produce, "core").Latency, "fetch"); ok {
		t.Error("a fetch request was charged to the produce direction")
	}
	others, ok := latencyOf(s.Directions[entity.Produce].Others.Latency, "produce")
	if !ok || others.Requests != 1 {
		t.Errorf("the unconfigured stranger's request: others %+v", s.Directions[entity.Produce].Others.Latency)
	}
	// The histograms /metrics exports: core's own, the others', cumulative.
	var seen []string
	for _, h := range r.a.LatencyHistograms() {
		seen = append(seen, h.EntityType+":"+h.Entity+":"+h.API)
		if h.FromFirstByte && h.API != "produce" {
			t.Errorf("a first-byte histogram for %s %s: only produce requests span segments", h.Entity, h.API)
		}
		if h.Entity == "core" && h.API == "produce" && !h.FromFirstByte {
			if h.Count != 100 || h.Cumulative[len(h.Cumulative)-1] != 100 {
				t.Errorf("core's produce histogram: %+v", h)
			}
		}
	}
	joined := strings.Join(seen, " ")
	for _, want := range []string{"client:core:produce", "client:core:fetch", "unconfigured:<others>:produce"} {
		if !strings.Contains(joined, want) {
			t.Errorf("histograms %v lack %s", seen, want)
		}
	}
	// A minute on, the 10 s window is empty and the minute's too.
	for i := 0; i < 61; i++ {
		r.clock.advance(time.Second)
	}
	s = r.cycle()
	if v := entityView(s, entity.Produce, "core").Latency; len(v) != 0 {
		t.Errorf("latency a minute after the last request: %+v", v)
	}
}

// A connection the data path marks not governed reports nothing.
func TestLatencyOfUngovernedIgnored(t *testing.T) {
	r := newRig(t, "")
	r.cycle()
	r.a.ObserveLatency(measured([2]uint32{maps.NotGoverned, maps.NotGoverned}, 0, time.Millisecond))
	if h := r.a.LatencyHistograms(); len(h) != 0 {
		t.Errorf("histograms %+v", h)
	}
}
