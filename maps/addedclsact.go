package maps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// The interfaces on which sluice added a clsact qdisc (under its legacy
// filters, or its egress steering filter), pinned beside the maps so that
// the agent that stops last, or `sluice unload`, removes exactly those once
// no filter is left under them, and never an operator's clsact, empty or
// not. Key: the interface's index; value: its name then (an index a new
// device reuses is not the one sluice touched).
const addedClsactPin = "added_clsact"

var addedClsactSpec = ebpf.MapSpec{Name: addedClsactPin, Type: ebpf.Hash, KeySize: 4, ValueSize: 16, MaxEntries: 256}

// RecordAddedClsact notes in pinDir that sluice added the clsact qdisc of
// the interface (index, name).
func RecordAddedClsact(pinDir string, ifindex int, dev string) error {
	path := filepath.Join(pinDir, addedClsactPin)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		if m, err = ebpf.NewMap(&addedClsactSpec); err == nil {
			if err = m.Pin(path); err != nil {
				m.Close()
			}
		}
	}
	if err != nil {
		return fmt.Errorf("record the clsact qdisc added on %s: %w", dev, err)
	}
	defer m.Close()
	var name [16]byte
	copy(name[:], dev)
	if err := m.Put(uint32(ifindex), name); err != nil {
		return fmt.Errorf("record the clsact qdisc added on %s: %w", dev, err)
	}
	return nil
}

// AddedClsacts reads that record: interface index → name. No record is an
// empty map.
func AddedClsacts(pinDir string) (map[int]string, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, addedClsactPin), &ebpf.LoadPinOptions{ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		return map[int]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the record of added clsact qdiscs: %w", err)
	}
	defer m.Close()
	out := map[int]string{}
	var idx uint32
	var name [16]byte
	it := m.Iterate()
	for it.Next(&idx, &name) {
		n := name[:]
		for i, b := range n {
			if b == 0 {
				n = n[:i]
				break
			}
		}
		out[int(idx)] = string(n)
	}
	return out, it.Err()
}

// ForgetAddedClsact drops an interface from that record (its clsact is
// gone): an index a later clsact of an operator's takes is not sluice's.
func ForgetAddedClsact(pinDir string, ifindex int) error {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, addedClsactPin), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update the record of added clsact qdiscs: %w", err)
	}
	defer m.Close()
	if err := m.Delete(uint32(ifindex)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("update the record of added clsact qdiscs: %w", err)
	}
	return nil
}
