package maps

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/internal/addr"
)

// Shaper is what the data path does with a governed segment while the
// agent's heartbeat is fresh (SHAPER_* in bpf/types.h).
type Shaper uint32

const (
	// ShaperNone counts only (shadow mode).
	ShaperNone Shaper = 0
	// ShaperHTB sets skb->priority to the entity's HTB class; ingress
	// segments are redirected to the IFB device that carries the tree.
	ShaperHTB Shaper = 1
	// ShaperEDT stamps departure times from per-entity rates and virtual
	// clocks; the fq qdisc releases them (ingress through an IFB with fq).
	ShaperEDT Shaper = 2
	// ShaperPolice drops what exceeds a per-entity token bucket.
	ShaperPolice Shaper = 3
	// ShaperHTBPolice steers fetch (egress) into HTB classes as ShaperHTB
	// does and polices produce (ingress) in place, as ShaperPolice does,
	// instead of redirecting it to the IFB: the ingress hooks after
	// sluice's (clsact filters, nftables netdev ingress) see every segment.
	ShaperHTBPolice Shaper = 4
)

// HeldInDataPath says whether the data path itself holds back (and counts
// as held) the direction's governed segments under this mode, rather than
// a qdisc it steers them to.
func (s Shaper) HeldInDataPath(dir Direction) bool {
	switch s {
	case ShaperEDT, ShaperPolice:
		return true
	case ShaperHTBPolice:
		return dir == Produce
	}
	return false
}

// Settings are the live knobs the agent writes.
type Settings struct {
	Shaper   Shaper
	IFBIndex int // ingress redirect target for ShaperHTB and ShaperEDT
	// EgressIFBIndex (htb on several interfaces): the IFB carrying the
	// egress tree, where EgressSelectProgram's filters send classified
	// segments; 0 when the tree sits on the one interface.
	EgressIFBIndex   int
	StaleAfter       time.Duration // heartbeat age beyond which nothing is held back
	SamplesPerSecond int           // per-connection sample budget
	// Horizon (edt): a segment that would wait longer is dropped.
	Horizon time.Duration
	// ECNThreshold (edt): an ECN-capable segment that waits longer is marked CE.
	ECNThreshold time.Duration
	// PoliceBurst (police): the token bucket's depth in bytes.
	PoliceBurst uint64
}

// SetSettings writes the live settings, keeping the last heartbeat.
func (d *Datapath) SetSettings(s Settings) error {
	var cur sluiceDatapathSettings
	if err := d.objs.Settings.Lookup(uint32(0), &cur); err != nil {
		return fmt.Errorf("read settings: %w", err)
	}
	cur.Shaper = uint32(s.Shaper)
	cur.IfbIfindex = uint32(s.IFBIndex)
	cur.EgressIfbIfindex = uint32(s.EgressIFBIndex)
	cur.StaleAfterNs = uint64(s.StaleAfter.Nanoseconds())
	cur.SamplesPerSec = uint32(s.SamplesPerSecond)
	cur.HorizonNs = uint64(s.Horizon.Nanoseconds())
	cur.EcnNs = uint64(s.ECNThreshold.Nanoseconds())
	cur.PoliceBurst = s.PoliceBurst
	if err := d.objs.Settings.Put(uint32(0), cur); err != nil {
		return fmt.Errorf("write settings: %w", err)
	}
	return nil
}

// ReadSettings reads the live settings back from the data path: what it
// does, whatever the configuration says (status and undo read it).
func (d *Datapath) ReadSettings() (Settings, error) {
	var cur sluiceDatapathSettings
	if err := d.objs.Settings.Lookup(uint32(0), &cur); err != nil {
		return Settings{}, fmt.Errorf("read settings: %w", err)
	}
	return Settings{
		Shaper: Shaper(cur.Shaper), IFBIndex: int(cur.IfbIfindex), EgressIFBIndex: int(cur.EgressIfbIfindex),
		StaleAfter: time.Duration(cur.StaleAfterNs), SamplesPerSecond: int(cur.SamplesPerSec),
		Horizon: time.Duration(cur.HorizonNs), ECNThreshold: time.Duration(cur.EcnNs), PoliceBurst: cur.PoliceBurst,
	}, nil
}

// String names what the data path does with governed segments.
func (s Shaper) String() string {
	switch s {
	case ShaperNone:
		return "none"
	case ShaperHTB:
		return "htb"
	case ShaperEDT:
		return "edt"
	case ShaperPolice:
		return "police"
	case ShaperHTBPolice:
		return "htb+police"
	}
	return fmt.Sprintf("shaper(%d)", uint32(s))
}

// EntityRate is an entity's rate for the BPF shapers.
type EntityRate struct {
	Entity         uint32
	BytesPerSecond uint64 // payload bytes/s; 0 = not shaped
}

// SetEntityRates writes many entities' rates for the BPF shapers (edt,
// police) in one batch. Their virtual clocks and buckets are untouched.
func (d *Datapath) SetEntityRates(dir Direction, rates []EntityRate) error {
	if len(rates) == 0 {
		return nil
	}
	keys := make([]uint32, len(rates))
	values := make([]sluiceEntityRate, len(rates))
	for i, r := range rates {
		keys[i] = uint32(int(dir)*d.opts.MaxEntities) + r.Entity
		values[i] = sluiceEntityRate{BytesPerSec: r.BytesPerSecond}
	}
	if _, err := d.objs.Rates.BatchUpdate(keys, values, nil); err != nil {
		return fmt.Errorf("set %d entity rates: %w", len(rates), err)
	}
	return nil
}

// Heartbeat tells the data path the agent is alive at monotonic time now
// (see MonotonicNow); the data path holds traffic back only while the last
// heartbeat is younger than StaleAfter.
func (d *Datapath) Heartbeat(now time.Duration) error {
	var cur sluiceDatapathSettings
	if err := d.objs.Settings.Lookup(uint32(0), &cur); err != nil {
		return fmt.Errorf("read settings: %w", err)
	}
	cur.HeartbeatNs = uint64(now.Nanoseconds())
	if err := d.objs.Settings.Put(uint32(0), cur); err != nil {
		return fmt.Errorf("write heartbeat: %w", err)
	}
	return nil
}

// MonotonicNow is CLOCK_MONOTONIC, the clock of the data path's
// bpf_ktime_get_ns.
func MonotonicNow() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // CLOCK_MONOTONIC cannot fail on Linux
	}
	return time.Duration(ts.Nano())
}

// SetListeners makes exactly these local ports governed.
func (d *Datapath) SetListeners(ports []uint16) error {
	want := map[uint16]bool{}
	for _, p := range ports {
		if p == 0 {
			return errors.New("set listeners: port 0")
		}
		want[p] = true
	}
	for p := range d.listenerPorts {
		if !want[p] {
			if err := d.objs.Listeners.Put(uint32(p), uint8(0)); err != nil {
				return fmt.Errorf("clear listener %d: %w", p, err)
			}
			delete(d.listenerPorts, p)
		}
	}
	for p := range want {
		if err := d.objs.Listeners.Put(uint32(p), uint8(1)); err != nil {
			return fmt.Errorf("set listener %d: %w", p, err)
		}
		d.listenerPorts[p] = true
	}
	return nil
}

// readListeners learns the ports a re-adopted (pinned) map already governs.
func (d *Datapath) readListeners() error {
	var port uint32
	var on uint8
	it := d.objs.Listeners.Iterate()
	for it.Next(&port, &on) {
		if on != 0 {
			d.listenerPorts[uint16(port)] = true
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read listeners: %w", err)
	}
	return nil
}

func exemptKey(p netip.Prefix) sluiceExemptKey {
	p = p.Masked()
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	return sluiceExemptKey{Prefixlen: uint32(bits), Addr: p.Addr().As16()}
}

// SetExempt makes exactly these prefixes exempt, whatever the pinned trie
// held before (an earlier agent's list), and forgets the open
// connections whose exemption that changed (a peer newly exempt, or no
// longer), so that their next segment enters them again under the new
// table: ranges added or removed reach live connections.
func (d *Datapath) SetExempt(prefixes []netip.Prefix) error {
	added, removed, err := d.SetExemptTable(prefixes)
	if err != nil || (len(removed) == 0 && len(added) == 0) {
		return err
	}
	var stale []ConnKey
	err = d.EachBinding(func(b Binding) {
		if ExemptionChanged(b, added, removed, prefixes) {
			stale = append(stale, b.Conn)
		}
	})
	if err != nil {
		return err
	}
	return d.ForgetConns(stale)
}

// ExemptionChanged says whether a connection's exemption differs under
// prefixes, which added and removed made of the table before: an exempt
// connection whose peer only removed ranges held, or a governed one whose
// peer an added range holds.
func ExemptionChanged(b Binding, added, removed, prefixes []netip.Prefix) bool {
	peer := b.Conn.Peer.Addr()
	if b.Produce == NotGoverned && b.Fetch == NotGoverned {
		return addr.AnyHolds(removed, peer) && !addr.AnyHolds(prefixes, peer)
	}
	return addr.AnyHolds(added, peer)
}

// SetExemptTable makes exactly these prefixes exempt in the table and
// returns what it added and removed; open connections keep their bindings
// (SetExempt also forgets those the change concerns).
func (d *Datapath) SetExemptTable(prefixes []netip.Prefix) (added, removed []netip.Prefix, err error) {
	if !d.exemptRead {
		if err := d.readExempt(); err != nil {
			return nil, nil, err
		}
	}
	want := map[sluiceExemptKey]bool{}
	for _, p := range prefixes {
		if !p.IsValid() {
			return nil, nil, fmt.Errorf("set exempt peers: invalid prefix %v", p)
		}
		want[exemptKey(p)] = true
	}
	for k := range d.exemptSet {
		if !want[k] {
			if err := d.objs.Exempt.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return added, removed, fmt.Errorf("remove exempt prefix: %w", err)
			}
			delete(d.exemptSet, k)
			removed = append(removed, keyPrefix(k))
		}
	}
	for k := range want {
		if err := d.objs.Exempt.Put(k, uint8(1)); err != nil {
			return added, removed, fmt.Errorf("add exempt prefix: %w", err)
		}
		if !d.exemptSet[k] {
			added = append(added, keyPrefix(k))
		}
		d.exemptSet[k] = true
	}
	return added, removed, nil
}

// readExempt learns the prefixes a re-adopted (pinned) trie holds, so
// that the first SetExempt removes what the configuration dropped.
func (d *Datapath) readExempt() error {
	var k sluiceExemptKey
	var on uint8
	it := d.objs.Exempt.Iterate()
	for it.Next(&k, &on) {
		d.exemptSet[k] = true
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read exempt peers: %w", err)
	}
	d.exemptRead = true
	return nil
}

func keyPrefix(k sluiceExemptKey) netip.Prefix {
	a := netip.AddrFrom16(k.Addr)
	if a.Is4In6() {
		return netip.PrefixFrom(a.Unmap(), int(k.Prefixlen)-96)
	}
	return netip.PrefixFrom(a, int(k.Prefixlen))
}

// SetClass sets the HTB class of an entity in one direction (0: none).
func (d *Datapath) SetClass(dir Direction, entity uint32, classID uint32) error {
	key := uint32(int(dir)*d.opts.MaxEntities) + entity
	if err := d.objs.Classes.Put(key, classID); err != nil {
		return fmt.Errorf("set class of entity %d: %w", entity, err)
	}
	return nil
}

// Classes lists a direction's entities with a class (entity → class id).
func (d *Datapath) Classes(dir Direction) (map[uint32]uint32, error) {
	n := uint32(d.opts.MaxEntities)
	keys := make([]uint32, 4096)
	values := make([]uint32, 4096)
	out := map[uint32]uint32{}
	var cursor ebpf.MapBatchCursor
	for {
		count, err := d.objs.Classes.BatchLookup(&cursor, keys, values, nil)
		for i := range count {
			if keys[i]/n == uint32(dir) && values[i] != 0 {
				out[keys[i]%n] = values[i]
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil // the end of the map
		}
		if err != nil {
			return nil, fmt.Errorf("read classes: %w", err)
		}
	}
}

// ClearClasses unsets every entity's class (a shaper rebuilt its trees:
// class ids from before mean nothing now).
func (d *Datapath) ClearClasses() error {
	n := 2 * d.opts.MaxEntities
	keys := make([]uint32, n)
	values := make([]uint32, n)
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := d.objs.Classes.BatchUpdate(keys, values, nil); err != nil {
		return fmt.Errorf("clear classes: %w", err)
	}
	return nil
}

// DepartureClock is an entity's edt virtual clock: the departure time
// (CLOCK_MONOTONIC) its next segment will be stamped with, unless the
// clock has fallen behind the present.
func (d *Datapath) DepartureClock(dir Direction, entity uint32) (time.Duration, error) {
	var c sluiceEdtClock
	if err := d.objs.Clocks.Lookup(uint32(int(dir)*d.opts.MaxEntities)+entity, &c); err != nil {
		return 0, fmt.Errorf("read the clock of entity %d: %w", entity, err)
	}
	return time.Duration(c.NextNs), nil
}
