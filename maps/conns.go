package maps

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"

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

func fromRaw4(r sluiceConnKey4) ConnKey {
	// The addresses are in network order: their bytes as they sit in memory.
	var peer, local [4]byte
	binary.NativeEndian.PutUint32(peer[:], r.PeerAddr)
	binary.NativeEndian.PutUint32(local[:], r.LocalAddr)
	return ConnKey{
		Peer:  netip.AddrPortFrom(netip.AddrFrom4(peer), r.PeerPort),
		Local: netip.AddrPortFrom(netip.AddrFrom4(local), r.LocalPort),
	}
}

// table returns the connection table of k's address family and k's key in it.
func (d *Datapath) table(k ConnKey) (*ebpf.Map, any) {
	if key, ok := k.raw4(); ok {
		return d.objs.Conns4, key
	}
	return d.objs.Conns6, k.raw()
}

// raw4 is k as the IPv4 table keys it (ok false for an IPv6 connection).
func (k ConnKey) raw4() (sluiceConnKey4, bool) {
	if !k.Peer.Addr().Unmap().Is4() {
		return sluiceConnKey4{}, false
	}
	peer, local := k.Peer.Addr().Unmap().As4(), k.Local.Addr().Unmap().As4()
	return sluiceConnKey4{
		PeerAddr:  binary.NativeEndian.Uint32(peer[:]),
		LocalAddr: binary.NativeEndian.Uint32(local[:]),
		PeerPort:  k.Peer.Port(),
		LocalPort: k.Local.Port(),
	}, true
}

// Binding is a connection's entity per direction (produce, fetch).
type Binding struct {
	Conn    ConnKey
	Produce uint32
	Fetch   uint32
	// Closing: a FIN or RST went by (read by EachBinding; BindConns ignores it).
	Closing bool
	// Born tells connections on one 4-tuple apart (struct conn_state's
	// born, read by EachBinding; BindConns ignores it).
	Born uint64
}

// BindConns writes the entities of many connections. It queues them in
// batches for the kernel's sluice_bind, which writes only the entities of
// each entry: a map update from here would also reset the request tracking
// that shares the entry. The data path sees each connection's old or new
// entities, never a mix.
func (d *Datapath) BindConns(bindings []Binding) error {
	requests := make([]sluiceBindRequest, len(bindings))
	for i, b := range bindings {
		requests[i] = sluiceBindRequest{Key: b.Conn.raw(), Op: bindOpBind, Bound: sluiceConnEntities{Entity: [2]uint32{b.Produce, b.Fetch}}}
	}
	return d.applyBindRequests(requests, "bind")
}

// ForgetConns removes connections from their tables; a connection already
// gone is not an error. Like bindings, it goes through sluice_bind, which
// also marks the data path's cached copies of them stale.
func (d *Datapath) ForgetConns(conns []ConnKey) error {
	requests := make([]sluiceBindRequest, len(conns))
	for i, k := range conns {
		requests[i] = sluiceBindRequest{Key: k.raw(), Op: bindOpForget}
	}
	return d.applyBindRequests(requests, "forget")
}

// The ops of a bind request (BIND_OP_* in bpf/types.h).
const (
	bindOpBind   = 0
	bindOpForget = 1
)

// applyBindRequests runs sluice_bind over requests in batches of the
// queue's size; what names the requests in errors.
func (d *Datapath) applyBindRequests(requests []sluiceBindRequest, what string) error {
	batchSize := int(d.objs.BindQueue.MaxEntries()) // BIND_BATCH
	for len(requests) > 0 {
		batch := requests[:min(len(requests), batchSize)]
		requests = requests[len(batch):]
		indexes := make([]uint32, len(batch))
		for i := range batch {
			indexes[i] = uint32(i)
		}
		if _, err := d.objs.BindQueue.BatchUpdate(indexes, batch, nil); err != nil {
			return fmt.Errorf("queue %d requests to %s: %w", len(batch), what, err)
		}
		applied, err := d.objs.SluiceBind.Run(&ebpf.RunOptions{Context: sluiceBindArgs{Count: uint32(len(batch))}})
		if err != nil {
			return fmt.Errorf("%s %d connections: %w", what, len(batch), err)
		}
		if int(applied) != len(batch) {
			return fmt.Errorf("%s %d connections: only %d applied (connection table full?)", what, len(batch), applied)
		}
	}
	return nil
}

// Binding returns a connection's entities, if bound.
func (d *Datapath) Binding(k ConnKey) (Binding, bool, error) {
	var v sluiceConnState
	table, raw := d.table(k)
	if err := table.Lookup(raw, &v); err != nil {
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

// EachBinding calls fn for every connection in the tables: bound ones,
// exempt ones (NotGoverned in both directions) and ones the data path only
// tracks so far (EntityUnknown in both). The tables may change meanwhile.
func (d *Datapath) EachBinding(fn func(Binding)) error {
	if err := eachConn(d.objs.Conns4, fromRaw4, fn); err != nil {
		return fmt.Errorf("scan IPv4 connections: %w", err)
	}
	if err := eachConn(d.objs.Conns6, fromRaw, fn); err != nil {
		return fmt.Errorf("scan IPv6 connections: %w", err)
	}
	return nil
}

// scanBatch is how many entries one batch lookup reads. The agent scans
// every connection once a minute inside a cycle; entry by entry (two
// syscalls each) 100,000 connections took ~280 ms.
const scanBatch = 4096

// eachConn reads a connection table in batches.
func eachConn[K any](table *ebpf.Map, conn func(K) ConnKey, fn func(Binding)) error {
	keys := make([]K, scanBatch)
	values := make([]sluiceConnState, scanBatch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := table.BatchLookup(&cursor, keys, values, nil)
		for i := range n {
			v := &values[i]
			fn(Binding{Conn: conn(keys[i]), Produce: v.Bound.Entity[0], Fetch: v.Bound.Entity[1], Closing: v.Track.Closing != 0, Born: v.Born})
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil // the end of the table
		}
		if err != nil {
			return err
		}
	}
}

// bound tells an entry the agent bound (or the data path marked exempt)
// from one the data path only tracks: entity 0 is each direction's unknown.
// The broker's first segment enters such an entry, so Binding reports a
// new connection unbound.
func (s sluiceConnState) bound() bool {
	return s.Bound.Entity != [2]uint32{EntityUnknown, EntityUnknown}
}

// PinnedBindings reads the connection tables an agent pinned under dir,
// without loading the data path: for tools and tests that look at what a
// running (or departed) agent left in the kernel.
func PinnedBindings(dir string) ([]Binding, error) {
	var all []Binding
	collect := func(b Binding) { all = append(all, b) }
	for _, name := range []string{"conns4", "conns6"} {
		table, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			return nil, fmt.Errorf("open pinned %s: %w", name, err)
		}
		switch {
		case table.ValueSize() != uint32(binary.Size(sluiceConnState{})):
			err = eachEarlierConn(table, name == "conns4", collect)
		case name == "conns4":
			err = eachConn(table, fromRaw4, collect)
		default:
			err = eachConn(table, fromRaw, collect)
		}
		table.Close()
		if err != nil {
			return nil, fmt.Errorf("scan pinned %s: %w", name, err)
		}
	}
	return all, nil
}

// eachEarlierConn reads a connection table an earlier release pinned whose
// values are shorter (fields appended since: maps/migrate.go
// grownByAppending): each value is the start of this release's, the rest
// zero.
func eachEarlierConn(table *ebpf.Map, v4 bool, fn func(Binding)) error {
	full := binary.Size(sluiceConnState{})
	if int(table.ValueSize()) > full || int(table.ValueSize()) < full-binary.Size(sluiceConnState{}.Lat) {
		return fmt.Errorf("values of %d bytes: a layout this build does not know (its own are %d)", table.ValueSize(), full)
	}
	key, value := make([]byte, table.KeySize()), make([]byte, table.ValueSize())
	padded := make([]byte, full)
	it := table.Iterate()
	for it.Next(&key, &value) {
		clear(padded)
		copy(padded, value)
		var st sluiceConnState
		if err := binary.Read(bytes.NewReader(padded), binary.NativeEndian, &st); err != nil {
			return err
		}
		var conn ConnKey
		if v4 {
			var k sluiceConnKey4
			if err := binary.Read(bytes.NewReader(key), binary.NativeEndian, &k); err != nil {
				return err
			}
			conn = fromRaw4(k)
		} else {
			var k sluiceConnKey
			if err := binary.Read(bytes.NewReader(key), binary.NativeEndian, &k); err != nil {
				return err
			}
			conn = fromRaw(k)
		}
		fn(Binding{Conn: conn, Produce: st.Bound.Entity[0], Fetch: st.Bound.Entity[1], Closing: st.Track.Closing != 0, Born: st.Born})
	}
	return it.Err()
}
