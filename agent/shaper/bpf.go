package shaper

import (
	"errors"
	"fmt"
	"github.com/sluice-dev/sluice/agent/shaping"
	"math"
	"os"

	"github.com/vishvananda/netlink"

	"github.com/sluice-dev/sluice/maps"
)

// RateWriter is the data path's per-entity rate table (maps.Datapath).
type RateWriter interface {
	SetEntityRates(dir maps.Direction, rates []maps.EntityRate) error
}

var _ RateWriter = (*maps.Datapath)(nil)

// BPF is the edt and police backends: rates live in a BPF map the data
// path reads per segment. edt stamps departure times on per-entity virtual
// clocks and needs the fq qdisc to release them (on the device for egress,
// on an IFB for ingress); police drops beyond a token bucket and needs no
// qdisc. What they held back is in the data path's counters (held bytes),
// which the agent reads; Held reports nothing of its own.
type BPF struct {
	kind  shaping.Kind
	rates RateWriter
	set   [2]map[uint32]bool
	// edt's qdiscs
	dev, ifb netlink.Link
	in       func(func() error) error
}

var _ shaping.Shaper = (*BPF)(nil)

// NewPolice returns the police backend.
func NewPolice(rates RateWriter) *BPF {
	return &BPF{kind: shaping.KindPolice, rates: rates, set: [2]map[uint32]bool{{}, {}}, in: InCurrentNamespace}
}

// ErrNoFQ: the kernel has no fq qdisc, which edt needs.
var ErrNoFQ = errors.New("the fq qdisc is not available")

// NewEDT puts fq at the root of the interface and of a new IFB device (for
// ingress) and returns the edt backend. It refuses a root qdisc sluice did
// not create, and leaves nothing behind on failure.
func NewEDT(ifindex int, rates RateWriter, in func(func() error) error) (*BPF, error) {
	if in == nil {
		in = InCurrentNamespace
	}
	b := &BPF{kind: shaping.KindEDT, rates: rates, set: [2]map[uint32]bool{{}, {}}, in: in}
	err := in(func() error {
		dev, err := netlink.LinkByIndex(ifindex)
		if err != nil {
			return err
		}
		if err := checkRootQdisc(dev, ifindex); err != nil {
			return err
		}
		if err := addFQ(dev); err != nil {
			return err
		}
		b.dev = dev
		if b.ifb, err = newIFB(IFBName(ifindex)); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(b.ifb); err != nil {
			return err
		}
		return addFQ(b.ifb)
	})
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("edt: %w", err)
	}
	return b, nil
}

func addFQ(link netlink.Link) error {
	fq := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(rootMajor, 0), Parent: netlink.HANDLE_ROOT}, QdiscType: "fq"}
	if err := netlink.QdiscReplace(fq); err != nil {
		return fmt.Errorf("%w on %s: %v", ErrNoFQ, link.Attrs().Name, err)
	}
	return nil
}

// ProbeFQ reports whether the fq qdisc can be installed, by trying it on a
// temporary IFB device that it removes again.
func ProbeFQ(in func(func() error) error) error {
	if in == nil {
		in = InCurrentNamespace
	}
	return in(func() error {
		name := probeIFBName(os.Getpid())
		probe := &netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: name}}
		if err := netlink.LinkAdd(probe); err != nil {
			return fmt.Errorf("probe fq: %w", err)
		}
		link, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		defer deleteIFB(link, true) // made by this call, never marked
		return addFQ(link)
	})
}

// IFBIndex is the ingress redirect target (edt), 0 for police.
func (b *BPF) IFBIndex() int {
	if b.ifb == nil {
		return 0
	}
	return b.ifb.Attrs().Index
}

// Kind implements Shaper.
func (b *BPF) Kind() shaping.Kind { return b.kind }

// SetRates implements Shaper: one batch write of the rate map.
func (b *BPF) SetRates(dir maps.Direction, rates []shaping.Rate) error {
	out := make([]maps.EntityRate, len(rates))
	for i, r := range rates {
		bps := uint64(0) // unlimited: not shaped
		if !math.IsInf(r.BytesPerSecond, 1) {
			bps = uint64(math.Max(r.BytesPerSecond, minRate))
		}
		out[i] = maps.EntityRate{Entity: r.Entity, BytesPerSecond: bps}
		b.set[dir][r.Entity] = bps != 0
	}
	return b.rates.SetEntityRates(dir, out)
}

// SetCapacity implements Shaper: edt and police hold each entity to its
// own rate, with no shared parent (the hierarchy is htb's).
func (b *BPF) SetCapacity(maps.Direction, float64) error { return nil }

// Remove implements Shaper.
func (b *BPF) Remove(dir maps.Direction, entity uint32) error {
	delete(b.set[dir], entity)
	return b.rates.SetEntityRates(dir, []maps.EntityRate{{Entity: entity}})
}

// Held implements Shaper: the data path's counters carry it.
func (b *BPF) Held(maps.Direction) ([]shaping.Held, error) { return nil, nil }

// Close clears the rates and removes edt's qdiscs and IFB.
func (b *BPF) Close() error {
	var errs []error
	for dir, set := range b.set {
		var zero []maps.EntityRate
		for e := range set {
			zero = append(zero, maps.EntityRate{Entity: e})
		}
		errs = append(errs, b.rates.SetEntityRates(maps.Direction(dir), zero))
		b.set[dir] = map[uint32]bool{}
	}
	errs = append(errs, b.in(func() error {
		var errs []error
		if b.dev != nil {
			errs = append(errs, deleteRoot(b.dev))
			b.dev = nil
		}
		if b.ifb != nil {
			errs = append(errs, DeleteIFB(b.ifb))
			b.ifb = nil
		}
		return errors.Join(errs...)
	}))
	return errors.Join(errs...)
}
