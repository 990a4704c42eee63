package maps

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// EntityNameMax is the longest entity name the registry map keeps; a longer
// one is not persisted (its entity gets a new id after a restart).
const EntityNameMax = 254

// SaveEntity records an entity id's kind and name so a restarted agent
// rebuilds the same registry. It reports false for a name too long to keep.
func (d *Datapath) SaveEntity(id uint32, kind uint8, name string) (bool, error) {
	if len(name) > EntityNameMax {
		return false, nil
	}
	v := sluiceEntityName{Kind: kind, Len: uint8(len(name))}
	copy(v.Name[:], name)
	if err := d.objs.EntityNames.Put(id, v); err != nil {
		return false, fmt.Errorf("save entity %d: %w", id, err)
	}
	return true, nil
}

// DeleteEntity forgets a reclaimed id.
func (d *Datapath) DeleteEntity(id uint32) error {
	if err := d.objs.EntityNames.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("forget entity %d: %w", id, err)
	}
	return nil
}

// EachEntity calls fn for every saved entity.
func (d *Datapath) EachEntity(fn func(id uint32, kind uint8, name string)) error {
	var id uint32
	var v sluiceEntityName
	it := d.objs.EntityNames.Iterate()
	for it.Next(&id, &v) {
		fn(id, v.Kind, string(v.Name[:min(int(v.Len), EntityNameMax)]))
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read saved entities: %w", err)
	}
	return nil
}
