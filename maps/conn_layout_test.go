package maps

import (
	"testing"
	"unsafe"
)

// The connection table's value keeps the size and layout of the release
// before RST proof and position regain (which took struct track's two pad
// bytes, and a word shared with size_partial): an agent upgraded over
// pinned tables reuses them whole, with no migration (migrate.go), and the
// entries it carries read as not settled and not yet searching.
func TestConnStateKeepsItsLayout(t *testing.T) {
	var st sluiceConnState
	if got := unsafe.Sizeof(st); got != 112 {
		t.Errorf("struct conn_state is %d bytes, want 112: a new layout needs migrate.go's carrying", got)
	}
	if got := unsafe.Sizeof(st.Track); got != 48 {
		t.Errorf("struct track is %d bytes, want 48", got)
	}
	if s, r := unsafe.Offsetof(st.Track.Settled), unsafe.Offsetof(st.Track.Regain); s != 46 || r != 47 {
		t.Errorf("settled at %d, regain at %d: want the former pad bytes, 46 and 47", s, r)
	}
}
