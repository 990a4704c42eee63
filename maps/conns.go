package maps

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// ConnKey identifies a connection from the broker's side: Local is the
// broker listener address, Peer the client. It is comparable, so the
// learner keys its per-connection state by it.
type ConnKey struct {
	Peer  netip.AddrPort
	Local netip.AddrPort
}

func (k ConnKey) String() string { return k.Peer.String() + "->" + k.Local.String() }

func (k ConnKey) raw() sluiceConnKey {
	return sluiceConnKey{
		PeerAddr:  k.Peer.Addr().As16(),
		LocalAddr: k.Local.Addr().As16(),
		PeerPort:  k.Peer.Port(),
		LocalPort: k.Local.Port(),
	}
}

func fromRaw(r sluiceConnKey) ConnKey {
	return ConnKey{
		Peer:  netip.AddrPortFrom(netip.AddrFrom16(r.PeerAddr).Unmap(), r.PeerPort),
		Local: netip.AddrPortFrom(netip.AddrFrom16(r.LocalAddr).Unmap(), r.LocalPort),
	}
}

// Binding is a connection's entity per direction (produce, fetch).
type Binding struct {
	Conn    ConnKey
	Produce uint32
	Fetch   uint32
}

// BindConns writes the entities of many connections. It queues them in
// batches for the kernel's sluice_bind, which writes only the entities of
// each entry: a map update from here would also reset the request tracking
// that shares the entry. The data path sees each connection's old or new
// entities, never a mix.
func (d *Datapath) BindConns(bindings []Binding) error {
	batchSize := int(d.objs.BindQueue.MaxEntries()) // BIND_BATCH
	for len(bindings) > 0 {
		batch := bindings[:min(len(bindings), batchSize)]
		bindings = bindings[len(batch):]
		indexes := make([]uint32, len(batch))
		requests := make([]sluiceBindRequest, len(batch))
		for i, b := range batch {
			indexes[i] = uint32(i)
			requests[i] = sluiceBindRequest{Key: b.Conn.raw(), Bound: sluiceConnEntities{Entity: [2]uint32{b.Produce, b.Fetch}}}
		}
		if _, err := d.objs.BindQueue.BatchUpdate(indexes, requests, nil); err != nil {
			return fmt.Errorf("queue %d bindings: %w", len(batch), err)
		}
		applied, err := d.objs.SluiceBind.Run(&ebpf.RunOptions{Context: sluiceBindArgs{Count: uint32(len(batch))}})
		if err != nil {
			return fmt.Errorf("bind %d connections: %w", len(batch), err)
		}
		if int(applied) != len(batch) {
			return fmt.Errorf("bind %d connections: only %d applied (connection table full?)", len(batch), applied)
		}
	}
	return nil
}

// UnbindConn forgets a connection: its bytes go to the unknown entity.
func (d *Datapath) UnbindConn(k ConnKey) error {
	raw := k.raw()
	if err := d.objs.Conns.Delete(raw); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unbind %s: %w", k, err)
	}
	return nil
}

// Binding returns a connection's entities, if bound.
func (d *Datapath) Binding(k ConnKey) (Binding, bool, error) {
	var v sluiceConnState
	if err := d.objs.Conns.Lookup(k.raw(), &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return Binding{}, false, nil
		}
		return Binding{}, false, fmt.Errorf("look up %s: %w", k, err)
	}
	if !v.bound() {
		return Binding{}, false, nil
	}
	return Binding{Conn: k, Produce: v.Bound.Entity[0], Fetch: v.Bound.Entity[1]}, true, nil
}

// EachBinding calls fn for every bound connection (exempt ones included,
// with NotGoverned in both directions). The table may change meanwhile.
func (d *Datapath) EachBinding(fn func(Binding)) error {
	var k sluiceConnKey
	var v sluiceConnState
	it := d.objs.Conns.Iterate()
	for it.Next(&k, &v) {
		if !v.bound() {
			continue
		}
		fn(Binding{Conn: fromRaw(k), Produce: v.Bound.Entity[0], Fetch: v.Bound.Entity[1]})
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("iterate connections: %w", err)
	}
	return nil
}

// bound tells an entry the agent bound (or the data path marked exempt)
// from one the data path only tracks: entity 0 is each direction's unknown.
func (s sluiceConnState) bound() bool {
	return s.Bound.Entity != [2]uint32{EntityUnknown, EntityUnknown}
}
