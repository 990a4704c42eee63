package maps

import (
	"testing"
	"unsafe"
)

// The connection table's value: struct track keeps the size and layout of
// the release before RST proof and position regain (which took its two pad
// bytes, and a word shared with size_partial), and the value only grows by
// fields appended at its end (the pending request's size, after the
// latency state), so an agent upgraded over pinned tables carries every
// entry over as the start of its own (migrate.go grownByAppending): the
// entries it carries read as not settled, not yet searching, and with no
// request size.
func TestConnStateKeepsItsLayout(t *testing.T) {
	var st sluiceConnState
	if got := unsafe.Sizeof(st); got != 120 {
		t.Errorf("struct conn_state is %d bytes, want 120: a new layout needs migrate.go's carrying", got)
	}
	if got := unsafe.Sizeof(st.Track); got != 48 {
		t.Errorf("struct track is %d bytes, want 48", got)
	}
	if s, r := unsafe.Offsetof(st.Track.Settled), unsafe.Offsetof(st.Track.Regain); s != 46 || r != 47 {
		t.Errorf("settled at %d, regain at %d: want the former pad bytes, 46 and 47", s, r)
	}
	// The previous release's value ended at 112 bytes, with the latency
	// state's cand_size: what came after it must be appended.
	if got := unsafe.Offsetof(st.Lat) + unsafe.Offsetof(st.Lat.ReqSize); got != 112 {
		t.Errorf("the request size at %d, want 112: past the previous release's value", got)
	}
}
