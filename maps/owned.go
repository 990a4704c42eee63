package maps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// The record of the host objects sluice made outside its pins, pinned
// beside the maps so that a later agent and `sluice unload` find them by
// that record (and need no configuration): the clsact qdiscs it added
// (under its legacy filters or its egress steering filter), removed once no
// filter is left under them and never an operator's; and its IFB devices.
// Key: the kind and the interface index; value: the device's name then (an
// index a new device reuses is not the one sluice made).
const OwnedRecordPin = "owned"

// OwnedKind is what a record entry is.
type OwnedKind uint32

const (
	// OwnedClsact: sluice added the clsact qdisc of this interface.
	OwnedClsact OwnedKind = 1
	// OwnedIFB: sluice made this IFB device.
	OwnedIFB OwnedKind = 2
)

type ownedKey struct {
	Kind    uint32
	Ifindex uint32
}

var ownedSpec = ebpf.MapSpec{Name: OwnedRecordPin, Type: ebpf.Hash, KeySize: 8, ValueSize: 16, MaxEntries: 1024}

// RecordOwned notes in pinDir that sluice made the object (kind, index,
// name).
func RecordOwned(pinDir string, kind OwnedKind, ifindex int, name string) error {
	path := filepath.Join(pinDir, OwnedRecordPin)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		if m, err = ebpf.NewMap(&ownedSpec); err == nil {
			if err = m.Pin(path); err != nil {
				m.Close()
			}
		}
	}
	if err != nil {
		return fmt.Errorf("record %s as sluice's: %w", name, err)
	}
	defer m.Close()
	var v [16]byte
	copy(v[:], name)
	if err := m.Put(ownedKey{uint32(kind), uint32(ifindex)}, v); err != nil {
		return fmt.Errorf("record %s as sluice's: %w", name, err)
	}
	return nil
}

// Owned reads the record's entries of one kind: interface index → name.
// No record is an empty map.
func Owned(pinDir string, kind OwnedKind) (map[int]string, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, OwnedRecordPin), &ebpf.LoadPinOptions{ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		return map[int]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the record of sluice's host objects: %w", err)
	}
	defer m.Close()
	out := map[int]string{}
	var k ownedKey
	var name [16]byte
	it := m.Iterate()
	for it.Next(&k, &name) {
		if OwnedKind(k.Kind) != kind {
			continue
		}
		n := name[:]
		for i, b := range n {
			if b == 0 {
				n = n[:i]
				break
			}
		}
		out[int(k.Ifindex)] = string(n)
	}
	return out, it.Err()
}

// ForgetOwned drops an entry (the object is gone): an index a later
// object of another's takes is not sluice's.
func ForgetOwned(pinDir string, kind OwnedKind, ifindex int) error {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, OwnedRecordPin), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update the record of sluice's host objects: %w", err)
	}
	defer m.Close()
	if err := m.Delete(ownedKey{uint32(kind), uint32(ifindex)}); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("update the record of sluice's host objects: %w", err)
	}
	return nil
}
