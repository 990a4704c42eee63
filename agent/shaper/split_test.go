package shaper

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/internal/netns"
	"github.com/sluice-dev/sluice/maps"
)

// recordedRates is a RateWriter that keeps what it was given.
type recordedRates map[[2]uint32]uint64

func (r recordedRates) SetEntityRates(dir maps.Direction, rates []maps.EntityRate) error {
	for _, e := range rates {
		r[[2]uint32{uint32(dir), e.Entity}] = e.BytesPerSecond
	}
	return nil
}

// htb+police: fetch rates become htb classes, produce rates police
// buckets and never classes; an agent that shaped produce with htb leaves
// produce classes that the split releases on adoption; Close leaves the
// device as it was and no rate behind.
func TestSplitRoutesEachDirection(t *testing.T) {
	netns.RequireRoot(t, "builds namespaces, qdiscs and IFB devices")
	pair := netns.NewPair(t)
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	before := tcState(t, pair.Broker, pair.BrokerDev)
	cw := &classes{}
	first := htbWithThreeClasses(t, pair, idx, cw) // left running (keep_attached_on_exit)
	if len(first.trees[maps.Produce].entity) != 1 {
		t.Fatalf("the first agent's produce classes: %v", first.trees[maps.Produce].entity)
	}
	h, err := NewHTB(idx, cw, 200*time.Millisecond, pair.Broker.Do)
	if err != nil {
		t.Fatal(err)
	}
	rates := recordedRates{}
	police := NewPolice(rates)
	police.in = pair.Broker.Do
	s, err := NewSplit(h, police)
	if err != nil {
		t.Fatal(err)
	}
	if s.Kind() != shaping.KindHTBPolice || s.Kind().DataPathMode() != maps.ShaperHTBPolice {
		t.Errorf("kind %s (data path %v), want htb+police", s.Kind(), s.Kind().DataPathMode())
	}
	if got, _ := cw.Classes(maps.Produce); len(got) != 0 || len(h.trees[maps.Produce].entity) != 0 {
		t.Errorf("produce classes kept under htb+police: data path %v, tree %v", got, h.trees[maps.Produce].entity)
	}
	if got, _ := cw.Classes(maps.Fetch); len(got) != 2 {
		t.Errorf("fetch classes adopted: %v, want entities 5 and 6", got)
	}
	if err := s.SetRates(maps.Produce, []shaping.Rate{{Entity: 7, BytesPerSecond: 3e6}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRates(maps.Fetch, []shaping.Rate{{Entity: 8, BytesPerSecond: 4e6}}); err != nil {
		t.Fatal(err)
	}
	if rates[[2]uint32{uint32(maps.Produce), 7}] != 3e6 {
		t.Errorf("produce rate not in the police table: %v", rates)
	}
	if _, ok := rates[[2]uint32{uint32(maps.Fetch), 8}]; ok {
		t.Errorf("a fetch rate went to the police table: %v", rates)
	}
	if cw.set[[2]uint32{uint32(maps.Fetch), 8}] == 0 || cw.set[[2]uint32{uint32(maps.Produce), 7}] != 0 {
		t.Errorf("classes: %v, want fetch entity 8 classified and produce entity 7 not", cw.set)
	}
	if err := s.Remove(maps.Produce, 7); err != nil || rates[[2]uint32{uint32(maps.Produce), 7}] != 0 {
		t.Errorf("produce entity 7 not released: %v %v", err, rates)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); after != before {
		t.Errorf("closed, the device differs.\nbefore: %s\nafter:  %s", before, after)
	}
}
