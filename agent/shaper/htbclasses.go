package shaper

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/maps"
)

// Each entity's class in an HTB tree: its guaranteed rate and ceiling, set
// once a cycle, and what the qdiscs hold.

// SetRates implements Shaper.
func (h *HTB) SetRates(dir maps.Direction, rates []shaping.Rate) error {
	return h.in(func() error { return h.setRates(dir, rates) })
}

func (h *HTB) setRates(dir maps.Direction, rates []shaping.Rate) error {
	t := h.trees[dir]
	var errs []error
	// Changes to existing classes go out in batches (see batch).
	b := &batch{sock: h.sock}
	for _, r := range rates {
		if math.IsInf(r.BytesPerSecond, 1) {
			errs = append(errs, h.remove(dir, r.Entity))
			continue
		}
		wire := math.Max(wireRate(r.BytesPerSecond), minRate)
		guaranteed := math.Min(math.Max(wireRate(r.Guaranteed), minRate), wire)
		c := t.entity[r.Entity]
		if c == nil {
			var err error
			if c, err = h.addClass(dir, t, r.Entity, guaranteed, wire); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if c.wire == wire && c.guaranteed == guaranteed {
			continue
		}
		if err := b.add(classChange(t.htbClass(c.minor, guaranteed, wire))); err != nil {
			return err
		}
		c.wire, c.guaranteed = wire, guaranteed
		// Keep the queue bound to the delay bound as the rate moves.
		if q := queueBytes(wire, h.delay); q > c.queue*5/4 || q < c.queue*4/5 {
			if err := b.add(t.leaf(c.minor, q).request(unix.NLM_F_CREATE | unix.NLM_F_REPLACE)); err != nil {
				return err
			}
			c.queue = q
		}
	}
	if err := b.flush(); err != nil {
		return err
	}
	if err := b.err(); err != nil {
		errs = append(errs, fmt.Errorf("htb: change rates: %w", err))
	}
	return errors.Join(errs...)
}

func (h *HTB) addClass(dir maps.Direction, t *htbTree, entity uint32, guaranteed, wire float64) (*htbClass, error) {
	var minor uint16
	if n := len(t.free); n > 0 {
		minor, t.free = t.free[n-1], t.free[:n-1]
	} else {
		if t.next > lastMinor {
			return nil, fmt.Errorf("htb: no class left for entity %d (%d in use)", entity, len(t.entity))
		}
		minor = t.next
		t.next++
	}
	c := &htbClass{minor: minor, wire: wire, guaranteed: guaranteed, queue: queueBytes(wire, h.delay)}
	if err := h.nl.ClassReplace(t.htbClass(minor, guaranteed, wire)); err != nil {
		t.free = append(t.free, minor)
		return nil, fmt.Errorf("htb: add class for entity %d: %w", entity, err)
	}
	if err := t.leaf(minor, c.queue).replace(); err != nil {
		h.deleteClass(t.htbClass(minor, guaranteed, wire))
		t.free = append(t.free, minor)
		return nil, fmt.Errorf("htb: add queue for entity %d: %w", entity, err)
	}
	if err := h.classes.SetClass(dir, entity, netlink.MakeHandle(rootMajor, minor)); err != nil {
		h.deleteClass(t.htbClass(minor, guaranteed, wire))
		t.free = append(t.free, minor)
		return nil, err
	}
	t.entity[entity] = c
	return c, nil
}

// htbClass describes entity class 1:minor under the parent, guaranteed a
// wire rate and capped at a ceiling. Each burst covers 10 ms at its rate
// and at least two GSO segments, so large segments do not stall the class.
func (t *htbTree) htbClass(minor uint16, guaranteed, ceil float64) *netlink.HtbClass {
	return netlink.NewHtbClass(netlink.ClassAttrs{
		LinkIndex: t.link.Attrs().Index,
		Parent:    netlink.MakeHandle(rootMajor, parentMinor),
		Handle:    netlink.MakeHandle(rootMajor, minor),
	}, netlink.HtbClassAttrs{Rate: htbBits(guaranteed), Ceil: htbBits(ceil), Buffer: burst(guaranteed), Cbuffer: burst(ceil), Quantum: classQuantum})
}

// parentClass is 1:1 at the tree's capacity.
func (t *htbTree) parentClass() *netlink.HtbClass {
	bits := htbBits(t.capacity)
	return netlink.NewHtbClass(netlink.ClassAttrs{
		LinkIndex: t.link.Attrs().Index,
		Parent:    netlink.MakeHandle(rootMajor, 0),
		Handle:    netlink.MakeHandle(rootMajor, parentMinor),
	}, netlink.HtbClassAttrs{Rate: bits, Ceil: bits, Buffer: burst(t.capacity), Cbuffer: burst(t.capacity), Quantum: classQuantum})
}

func burst(wire float64) uint32 {
	return uint32(math.Min(math.Max(wire*0.01, 2*64<<10), math.MaxUint32))
}

// htbBits is a rate in bytes/s as HTB's bits/s, held to [1 byte/s,
// config.MaxRate]: configuration refuses anything beyond, and this keeps
// a computed rate (a ceiling of +Inf, a NaN) from wrapping the kernel's
// field.
func htbBits(bytes float64) uint64 {
	if !(bytes >= 1) { // NaN too
		return 8
	}
	return uint64(math.Min(bytes, config.MaxRate) * 8)
}

// SetCapacity implements Shaper: the parent class's rate and ceiling.
func (h *HTB) SetCapacity(dir maps.Direction, bytesPerSecond float64) error {
	return h.in(func() error {
		t := h.trees[dir]
		wire := unlimitedWire
		if !math.IsInf(bytesPerSecond, 1) && bytesPerSecond > 0 {
			wire = math.Max(wireRate(bytesPerSecond), minRate)
		}
		if t.capacity == wire {
			return nil
		}
		old := t.capacity
		t.capacity = wire
		if err := h.nl.ClassChange(t.parentClass()); err != nil {
			t.capacity = old
			return fmt.Errorf("htb: set the capacity of %s: %w", t.link.Attrs().Name, err)
		}
		return nil
	})
}

func (t *htbTree) leaf(minor uint16, limit uint32) bfifo {
	return bfifo{ifindex: t.link.Attrs().Index, handle: netlink.MakeHandle(minor, 0), parent: netlink.MakeHandle(rootMajor, minor), limit: limit}
}

// Remove implements Shaper.
func (h *HTB) Remove(dir maps.Direction, entity uint32) error {
	return h.in(func() error { return h.remove(dir, entity) })
}

func (h *HTB) remove(dir maps.Direction, entity uint32) error {
	t := h.trees[dir]
	c := t.entity[entity]
	if c == nil {
		return nil
	}
	// Unclassify first, so no packet is steered to a class that is going.
	if err := h.classes.SetClass(dir, entity, 0); err != nil {
		return err
	}
	delete(t.entity, entity)
	if err := h.deleteClass(t.htbClass(c.minor, c.guaranteed, c.wire)); err != nil {
		return fmt.Errorf("htb: remove class of entity %d: %w", entity, err)
	}
	t.free = append(t.free, c.minor)
	return nil
}

// deleteClass is the one place an entity class of sluice's tree is
// deleted (its leaf queue goes with it), through the tree's netlink
// socket; a class already gone is not an error. Only classes under
// sluice's own root (found by identity, treeOf) come here.
func (h *HTB) deleteClass(cl *netlink.HtbClass) error {
	if err := h.nl.ClassDel(cl); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// releaseAll removes every entity's class in one direction.
func (h *HTB) releaseAll(dir maps.Direction) error {
	return h.in(func() error {
		t := h.trees[dir]
		if t == nil {
			return nil
		}
		for entity := range t.entity {
			if err := h.remove(dir, entity); err != nil {
				return err
			}
		}
		return nil
	})
}

// Held implements Shaper from the classes' statistics: queued bytes now,
// and drops and overlimit events since the last call.
func (h *HTB) Held(dir maps.Direction) (out []shaping.Held, err error) {
	err = h.in(func() error { out, err = h.held(dir); return err })
	return out, err
}

func (h *HTB) held(dir maps.Direction) ([]shaping.Held, error) {
	t := h.trees[dir]
	list, err := h.nl.ClassList(t.link, netlink.MakeHandle(rootMajor, 0))
	if err != nil {
		return nil, fmt.Errorf("htb: read class statistics: %w", err)
	}
	byMinor := map[uint16]*netlink.ClassStatistics{}
	for _, cl := range list {
		a := cl.Attrs()
		if a.Handle>>16 == rootMajor && a.Statistics != nil {
			byMinor[uint16(a.Handle&0xffff)] = a.Statistics
		}
	}
	out := make([]shaping.Held, 0, len(t.entity))
	for entity, c := range t.entity {
		st := byMinor[c.minor]
		if st == nil || st.Queue == nil {
			continue
		}
		q := st.Queue
		held := shaping.Held{Entity: entity, Backlog: uint64(q.Backlog), Dropped: uint64(q.Drops - c.drops)}
		if st.Basic != nil {
			held.Sent = payloadBytes(st.Basic.Bytes)
		}
		overlimits := q.Overlimits - c.overlimits
		c.drops, c.overlimits = q.Drops, q.Overlimits
		held.Throttled = q.Backlog > 0 || overlimits > 0 || held.Dropped > 0
		if c.wire > 0 {
			held.Delay = time.Duration(float64(q.Backlog) / c.wire * float64(time.Second))
		}
		out = append(out, held)
	}
	return out, nil
}
