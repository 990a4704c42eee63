package maps

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// PeerEntity attributes a TLS listener's connections by their peer: a
// connection to Port from an address in Prefix starts bound to these
// entities (longest prefix first). An invalid (zero) Prefix is the
// listener's own entry, which every peer of the port matches: its
// fallback entity. A port with no entry is learned from requests.
type PeerEntity struct {
	Port           uint16
	Prefix         netip.Prefix
	Produce, Fetch uint32
}

// peerKey lays a PeerEntity's match out as struct peer_key: the port
// (big-endian) then the address, v4 as v4-mapped.
func peerKey(port uint16, p netip.Prefix) sluicePeerKey {
	k := sluicePeerKey{Prefixlen: 16, Port: [2]uint8{uint8(port >> 8), uint8(port)}}
	if !p.IsValid() {
		return k
	}
	p = p.Masked()
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	k.Prefixlen += uint32(bits)
	k.Addr = p.Addr().As16()
	return k
}

// SetPeerEntities makes exactly these the data path's peer attributions.
// They apply to connections that start from now on; the caller rebinds
// the ones already open (BindConns), so a change reaches them too.
func (d *Datapath) SetPeerEntities(entries []PeerEntity) error {
	want := make(map[sluicePeerKey]sluiceConnEntities, len(entries))
	for _, e := range entries {
		if e.Port == 0 {
			return errors.New("set peer entities: port 0")
		}
		want[peerKey(e.Port, e.Prefix)] = sluiceConnEntities{Entity: [2]uint32{e.Produce, e.Fetch}}
	}
	if len(want) > int(d.objs.PeerEntities.MaxEntries()) {
		return fmt.Errorf("set peer entities: %d entries, the data path holds %d", len(want), d.objs.PeerEntities.MaxEntries())
	}
	for k := range d.peerSet {
		if _, keep := want[k]; !keep {
			if err := d.objs.PeerEntities.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("remove peer entity: %w", err)
			}
			delete(d.peerSet, k)
		}
	}
	for k, v := range want {
		if err := d.objs.PeerEntities.Put(k, v); err != nil {
			return fmt.Errorf("add peer entity: %w", err)
		}
		d.peerSet[k] = true
	}
	return nil
}

// readPeerEntities learns the entries a re-adopted (pinned) map holds, so
// that the first SetPeerEntities removes what the configuration dropped.
func (d *Datapath) readPeerEntities() error {
	var k sluicePeerKey
	var v sluiceConnEntities
	it := d.objs.PeerEntities.Iterate()
	for it.Next(&k, &v) {
		d.peerSet[k] = true
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read peer entities: %w", err)
	}
	return nil
}
