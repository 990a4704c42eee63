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

// BindConns writes the entities of many connections in one batch. The data
// path sees each connection's old or new entities, never a mix.
func (d *Datapath) BindConns(bindings []Binding) error {
	if len(bindings) == 0 {
		return nil
	}
	keys := make([]sluiceConnKey, len(bindings))
	values := make([]sluiceConnEntities, len(bindings))
	for i, b := range bindings {
		keys[i] = b.Conn.raw()
		values[i] = sluiceConnEntities{Entity: [2]uint32{b.Produce, b.Fetch}}
	}
	if _, err := d.objs.Conns.BatchUpdate(keys, values, nil); err != nil {
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return fmt.Errorf("bind %d connections: %w", len(bindings), err)
		}
		for i := range keys { // kernels without batch ops on LRU hashes
			if err := d.objs.Conns.Put(keys[i], values[i]); err != nil {
				return fmt.Errorf("bind %s: %w", bindings[i].Conn, err)
			}
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
	var v sluiceConnEntities
	if err := d.objs.Conns.Lookup(k.raw(), &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return Binding{}, false, nil
		}
		return Binding{}, false, fmt.Errorf("look up %s: %w", k, err)
	}
	return Binding{Conn: k, Produce: v.Entity[0], Fetch: v.Entity[1]}, true, nil
}

// EachBinding calls fn for every bound connection (exempt ones included,
// with NotGoverned in both directions). The table may change meanwhile.
func (d *Datapath) EachBinding(fn func(Binding)) error {
	var k sluiceConnKey
	var v sluiceConnEntities
	it := d.objs.Conns.Iterate()
	for it.Next(&k, &v) {
		fn(Binding{Conn: fromRaw(k), Produce: v.Entity[0], Fetch: v.Entity[1]})
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("iterate connections: %w", err)
	}
	return nil
}
