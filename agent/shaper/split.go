package shaper

import (
	"errors"

	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/maps"
)

// Split holds fetch with an htb tree and produce with the police token
// buckets (produce_shaper: police). Under htb alone, governed produce
// segments are redirected to sluice's IFB, a terminal verdict at ingress:
// clsact filters after sluice's program and nftables netdev ingress hooks
// never see them, and the IFB hands them back with classification
// skipped. Policed in place they go on through every later hook. The
// htb backend keeps its IFB and idle produce tree: the IFB is the record
// by which a later agent or `sluice unload` knows the egress tree is
// sluice's (and the device's queue length it found).
type Split struct {
	htb    *HTB
	police *BPF
}

var _ shaping.Shaper = (*Split)(nil)

// NewSplit pairs an htb backend (fetch) with the police backend (produce).
// Produce classes the htb backend adopted from an agent that shaped
// produce with htb are released: the data path no longer steers to them.
func NewSplit(htb *HTB, police *BPF) (*Split, error) {
	if err := htb.releaseAll(maps.Produce); err != nil {
		return nil, err
	}
	return &Split{htb: htb, police: police}, nil
}

// AddedClsact is the htb backend's (the steering filters' clsact qdiscs).
func (s *Split) AddedClsact() map[int]string { return s.htb.AddedClsact() }

func (s *Split) by(dir maps.Direction) shaping.Shaper {
	if dir == maps.Produce {
		return s.police
	}
	return s.htb
}

// Kind implements Shaper.
func (s *Split) Kind() shaping.Kind { return shaping.KindHTBPolice }

// HTB is the backend holding fetch (its IFB and steering for the daemon).
func (s *Split) HTB() *HTB { return s.htb }

// SetRates implements Shaper.
func (s *Split) SetRates(dir maps.Direction, rates []shaping.Rate) error {
	return s.by(dir).SetRates(dir, rates)
}

// SetCapacity implements Shaper: htb's parent class caps fetch; produce's
// buckets hold each entity alone.
func (s *Split) SetCapacity(dir maps.Direction, bytesPerSecond float64) error {
	return s.by(dir).SetCapacity(dir, bytesPerSecond)
}

// Remove implements Shaper.
func (s *Split) Remove(dir maps.Direction, entity uint32) error {
	return s.by(dir).Remove(dir, entity)
}

// Held implements Shaper: htb's queues for fetch; produce's held bytes
// are in the data path's counters.
func (s *Split) Held(dir maps.Direction) ([]shaping.Held, error) {
	return s.by(dir).Held(dir)
}

// Close implements Shaper: both backends, whatever either says.
func (s *Split) Close() error {
	return errors.Join(s.police.Close(), s.htb.Close())
}
