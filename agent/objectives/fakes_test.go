package objectives

import (
	"time"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/maps"
)

// registry is a fixed Entities: ids by key, some pinned.
type registry struct {
	ids    map[entity.Key]entity.ID
	pinned map[entity.ID]bool
}

func newRegistry() *registry {
	return &registry{ids: map[entity.Key]entity.ID{}, pinned: map[entity.ID]bool{}}
}

func (r *registry) add(id entity.ID, key entity.Key, pinned bool) {
	r.ids[key] = id
	r.pinned[id] = pinned
}

func (r *registry) Lookup(k entity.Key) (entity.ID, bool) { id, ok := r.ids[k]; return id, ok }
func (r *registry) Pinned(id entity.ID) bool              { return r.pinned[id] }

func (r *registry) Key(id entity.ID) (entity.Key, bool) {
	for k, i := range r.ids {
		if i == id {
			return k, true
		}
	}
	return entity.Key{}, false
}

// Each walks ids in increasing order, as the registry does.
func (r *registry) Each(fn func(entity.ID, entity.Key)) {
	for id := entity.ID(0); id < 64; id++ {
		if k, ok := r.Key(id); ok {
			fn(id, k)
		}
	}
}

func client(name string) entity.Key { return entity.Key{Kind: entity.KindClient, Name: name} }

// measured is a request of api on a connection bound to (produce, fetch),
// answered d after its last byte (which came 1 ms after its first).
func measured(bound [2]uint32, api uint16, d time.Duration) maps.LatencyEvent {
	first := 10 * time.Second
	return maps.LatencyEvent{Bound: bound, APIKey: api, FirstByte: first, LastByte: first + time.Millisecond, Response: first + time.Millisecond + d}
}
