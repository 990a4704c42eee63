package agent

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/maps"
)

// What the shaper says of each entity (queue delay, drops, bytes sent)
// reaches that entity's view and no other's, as of the cycle the view
// shows; drops add up over cycles; an entity the shaper says nothing of
// shows none; a class of an id past the registry is not read.
func TestShaperStatisticsReachTheirEntity(t *testing.T) {
	r := newRig(t, `
entities:
  clients:
    <default>: {quota_weight: 1}
`)
	names := []string{"a", "b", "c"}
	ids := map[string]uint32{}
	for _, n := range names {
		ids[n] = uint32(r.a.registry.Acquire(entity.Key{Kind: entity.KindClient, Name: n}, r.clock.t))
	}
	traffic := func() {
		for _, n := range names {
			r.dp.add(maps.Fetch, ids[n], 100)
		}
	}
	traffic()
	r.cycle() // rates written: the fake reports entities with a rate
	r.sh.stats[maps.Fetch] = map[uint32]shaping.Held{
		ids["a"]: {Delay: 3 * time.Millisecond, Dropped: 5, Sent: 777},
		ids["c"]: {Delay: 9 * time.Millisecond, Dropped: 1, Sent: 42},
	}
	r.sh.rates[maps.Fetch][uint32(r.a.registry.Limit())+5] = 1 // past the registry
	r.sh.stats[maps.Fetch][uint32(r.a.registry.Limit())+5] = shaping.Held{Dropped: 1000}
	traffic()
	s := r.cycle()
	want := map[string][3]float64{"a": {3, 5, 777}, "b": {0, 0, 0}, "c": {9, 1, 42}}
	for n, w := range want {
		v := entityView(s, entity.Fetch, n)
		if got := [3]float64{v.QueueDelayMillis, float64(v.DroppedPackets), float64(v.ShapedBytes)}; got != w || v.DroppedPacketsTotal != uint64(w[1]) {
			t.Errorf("%s: delay, drops, sent %v, drops in all %d; want %v, %v", n, got, v.DroppedPacketsTotal, w, w[1])
		}
	}
	// The next cycle's answer: the view follows it, drops add up; c is not
	// in it at all (its class gone, as after a failed write).
	// Every other entity with a class shows drops: c's view would show
	// some if it were read from any of them.
	r.sh.stats[maps.Fetch] = map[uint32]shaping.Held{}
	for e := range r.sh.rates[maps.Fetch] {
		r.sh.stats[maps.Fetch][e] = shaping.Held{Dropped: 1000, Sent: 1000}
	}
	r.sh.stats[maps.Fetch][ids["a"]] = shaping.Held{Dropped: 2, Sent: 900}
	delete(r.sh.rates[maps.Fetch], ids["c"])
	traffic()
	s = r.cycle()
	if v := entityView(s, entity.Fetch, "a"); v.DroppedPackets != 2 || v.DroppedPacketsTotal != 7 || v.ShapedBytes != 900 || v.QueueDelayMillis != 0 {
		t.Errorf("a after a second answer: %+v; want 2 dropped (7 in all), 900 sent, no delay", v)
	}
	if v := entityView(s, entity.Fetch, "c"); v.DroppedPackets != 0 || v.DroppedPacketsTotal != 1 || v.ShapedBytes != 0 {
		t.Errorf("c, of which the shaper said nothing: %+v; want nothing now, 1 dropped in all", v)
	}

	// A class of an id no entity holds now (one left over): what the
	// shaper says of it must not reach the next entity given that id.
	free := ids["c"] + 1
	r.sh.rates[maps.Fetch][free] = 1
	r.sh.stats[maps.Fetch][free] = shaping.Held{Dropped: 50, Throttled: true}
	traffic()
	r.cycle()
	// The left-over class goes; a new entity takes its id.
	delete(r.sh.rates[maps.Fetch], free)
	delete(r.sh.stats[maps.Fetch], free)
	if id := uint32(r.a.registry.Acquire(entity.Key{Kind: entity.KindClient, Name: "d"}, r.clock.t)); id != free {
		t.Fatalf("d got id %d, not the left-over class's %d: the test does not exercise what it names", id, free)
	}
	r.dp.add(maps.Fetch, free, 100)
	s = r.cycle()
	if v := entityView(s, entity.Fetch, "d"); v.DroppedPacketsTotal != 0 || v.Throttled {
		t.Errorf("d, new on the id of a class the shaper said 50 drops of two cycles ago: %+v; want none, not throttled", v)
	}
}
