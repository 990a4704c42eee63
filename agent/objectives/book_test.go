package objectives

import (
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/maps"
)

// A measurement goes to the entity of its request's direction (a fetch to
// the fetch entity, anything else to the produce one), to that
// direction's others when the entity has no series of its own, nowhere
// when the connection is not governed in that direction; an absurd one
// (a response before its request) is dropped and counted.
func TestObserveCharges(t *testing.T) {
	reg := newRegistry()
	reg.add(2, client("core"), true)
	reg.add(3, client("core-fetch"), true)
	reg.add(4, client("stranger"), false)
	tr := New(64, slog.Default())
	tr.AssignSeries(reg, config.Metrics{Entities: config.MetricsConfigured, MaxEntitySeries: 10})
	now := time.Unix(1000, 0)
	bad := measured([2]uint32{2, 3}, 0, 0)
	bad.Response = bad.FirstByte - time.Second
	cases := []struct {
		name    string
		ev      maps.LatencyEvent
		charged bool
		dir     entity.Direction
		id      entity.ID // othersEntity: the direction's others
		api     APIClass
	}{
		{"produce to the produce entity", measured([2]uint32{2, 3}, 0, time.Millisecond), true, entity.Produce, 2, APIProduce},
		{"fetch to the fetch entity", measured([2]uint32{2, 3}, 1, time.Millisecond), true, entity.Fetch, 3, APIFetch},
		{"metadata to the produce entity", measured([2]uint32{2, 3}, 3, time.Millisecond), true, entity.Produce, 2, APIOther},
		{"no series of its own: others", measured([2]uint32{4, 4}, 0, time.Millisecond), true, entity.Produce, othersEntity, APIProduce},
		{"not governed in the fetch direction", measured([2]uint32{2, maps.NotGoverned}, 1, time.Millisecond), false, 0, 0, 0},
		{"absurd: dropped", bad, true, 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, dropped := len(tr.book.series), tr.book.dropped
			if Charged(c.ev) != c.charged {
				t.Errorf("Charged %v, want %v", !c.charged, c.charged)
			}
			tr.Observe(now, c.ev)
			switch {
			case c.name == "absurd: dropped":
				if tr.book.dropped != dropped+1 || len(tr.book.series) != before {
					t.Errorf("dropped %d (was %d), series %d (was %d)", tr.book.dropped, dropped, len(tr.book.series), before)
				}
			case !c.charged:
				if len(tr.book.series) != before {
					t.Errorf("series %d, was %d", len(tr.book.series), before)
				}
			default:
				s := tr.book.series[latencyKey{dir: c.dir, id: c.id, api: c.api}]
				if s == nil || s.fromLast.count != 1 {
					t.Errorf("no series %v/%d/%v with the request: %+v", c.dir, c.id, c.api, tr.book.series)
				}
			}
		})
	}
	tr.Forget(2)
	for k := range tr.book.series {
		if k.id == 2 {
			t.Errorf("series %+v kept after Forget", k)
		}
	}
}

// The fetch objective's size rule: a response within 1.25 × its request
// + 16 bytes returned nothing; without either size every fetch counts.
func TestReturnedData(t *testing.T) {
	cases := []struct {
		request, response uint32
		want              bool
	}{
		{60, 18, false},          // an incremental session's idle poll
		{3360, 3750, false},      // a full fetch of 100 idle partitions
		{60, 91, false},          // 1.25 × 60 + 16, not beyond
		{60, 92, true},           // beyond
		{60, 18 + 61 + 70, true}, // a batch
		{0, 18, true},            // request size unknown
		{60, 0, true},            // response size unknown
	}
	for _, c := range cases {
		if got := returnedData(maps.LatencyEvent{RequestSize: c.request, ResponseSize: c.response}); got != c.want {
			t.Errorf("request %d, response %d: returned data %v, want %v", c.request, c.response, got, c.want)
		}
	}
}

// Histograms are cumulative, named through the registry (the others and
// unknown by their labels), first-byte only for produce, and an entity
// released since is left out.
func TestHistograms(t *testing.T) {
	reg := newRegistry()
	reg.add(entity.UnknownID, entity.Key{Kind: entity.KindUnknown}, false)
	reg.add(2, client("core"), true)
	reg.add(3, client("gone"), true)
	reg.add(4, client("stranger"), false)
	tr := New(64, slog.Default())
	tr.AssignSeries(reg, config.Metrics{Entities: config.MetricsConfigured, MaxEntitySeries: 10})
	now := time.Unix(1000, 0)
	for i := 1; i <= 10; i++ {
		tr.Observe(now, measured([2]uint32{2, 2}, 0, time.Duration(i)*time.Millisecond))
	}
	tr.Observe(now, measured([2]uint32{2, 2}, 1, time.Millisecond))
	tr.Observe(now, measured([2]uint32{3, 3}, 0, time.Millisecond))
	tr.Observe(now, measured([2]uint32{4, 4}, 0, time.Millisecond))
	tr.Observe(now, measured([2]uint32{0, 0}, 0, time.Millisecond))
	delete(reg.ids, client("gone"))
	got := map[string]Histogram{}
	for _, h := range tr.Histograms(reg) {
		name := h.Direction + " " + h.EntityType + ":" + h.Entity + " " + h.API
		if h.FromFirstByte {
			name += " first"
		}
		got[name] = h
	}
	want := map[string]uint64{
		"produce client:core produce": 10, "produce client:core produce first": 10, "fetch client:core fetch": 1,
		"produce unconfigured:<others> produce": 1, "produce unconfigured:<others> produce first": 1,
		"produce unknown: produce": 1, "produce unknown: produce first": 1,
	}
	for name, n := range want {
		h, ok := got[name]
		if !ok || h.Count != n || h.Cumulative[len(h.Cumulative)-1] != n {
			t.Errorf("%s: %+v (present %v), want %d requests", name, h, ok, n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("histograms %v, want only %v", got, want)
	}
	// 1 to 10 ms: 0 under 0.5 ms, 1 at most 1 ms, 2 at most 2.5 ms, 5 at most 5 ms, 10 at most 10 ms.
	h := got["produce client:core produce"]
	for i, bound := range LatencyBuckets {
		wantAt := map[float64]uint64{0.0005: 0, 0.001: 1, 0.0025: 2, 0.005: 5, 0.01: 10}
		if w, ok := wantAt[bound]; ok && h.Cumulative[i] != w {
			t.Errorf("%v requests at most %v s, want %d", h.Cumulative[i], bound, w)
		}
	}
}
