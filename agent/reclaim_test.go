package agent

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
	"github.com/sluice-dev/sluice/maps"
)

// A shaper whose Remove fails for hundreds of cycles while clients keep
// inventing client-ids costs the agent ids, never its life: the registry
// never hands out an id past its arrays, the ids whose cleanup failed are
// retried, and once Remove works again they are all released and reused.
func TestReclaimFailuresNeverLeakPastTheArrays(t *testing.T) {
	r := newRig(t, "max_entities: 30\nentity_idle_timeout: 2s\nnew_entities_per_peer: 1000\n")
	limit := r.a.registry.Limit()
	r.sh.failRemove = true
	port := uint16(30000)
	learnNew := func(n int) {
		for range n {
			port++
			c := maps.ConnKey{Peer: netip.AddrPortFrom(netip.MustParseAddr("198.18.0.9"), port), Local: brokerAddr}
			if err := r.a.Learn(maps.Sample{Conn: c, Born: 1, Data: kt.Frame(apiVersions(), 1, kt.Str(fmt.Sprintf("churn-%d", port))), Complete: true}); err != nil {
				t.Fatal(err)
			}
			delete(r.dp.bindings, c) // the connection is gone: its entity idles
		}
	}
	failures := 0
	for cycle := 0; cycle < 300; cycle++ {
		learnNew(5)
		r.clock.advance(time.Second)
		if err := r.a.Cycle(); err != nil {
			failures++
		}
		if n := len(r.a.registry.Reclaiming()); n > limit {
			t.Fatalf("cycle %d: %d ids reclaiming, more than the %d the arrays hold", cycle, n, limit)
		}
	}
	if failures == 0 {
		t.Fatal("no cycle reported the failing Remove")
	}
	stuck := len(r.a.registry.Reclaiming())
	if stuck == 0 {
		t.Fatal("no id is waiting for its cleanup while Remove fails")
	}
	// Remove works again: every stuck id is cleaned and released, and new
	// client-ids get entities of their own again.
	r.sh.failRemove = false
	r.clock.advance(time.Second)
	if err := r.a.Cycle(); err != nil {
		t.Fatalf("cycle after Remove recovered: %v", err)
	}
	if n := len(r.a.registry.Reclaiming()); n != 0 {
		t.Errorf("%d ids still reclaiming after Remove recovered (were %d)", n, stuck)
	}
	learnNew(1)
	c := maps.ConnKey{Peer: netip.AddrPortFrom(netip.MustParseAddr("198.18.0.9"), port), Local: brokerAddr}
	if err := r.a.Learn(maps.Sample{Conn: c, Born: 1, Data: kt.Frame(apiVersions(), 1, kt.Str("fresh")), Complete: true}); err != nil {
		t.Fatal(err)
	}
	if b := r.dp.bindings[c]; b.Produce == maps.EntityUnknown || b.Produce == uint32(1) {
		t.Errorf("a new client-id after recovery got %+v, want an entity of its own", b)
	}
}
