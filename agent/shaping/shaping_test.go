package shaping

import (
	"testing"

	"github.com/sluice-dev/sluice/maps"
)

// Each backend tells the data path what to do with governed segments;
// shadow and anything unknown hold nothing back.
func TestKindDataPathMode(t *testing.T) {
	for kind, want := range map[Kind]maps.Shaper{KindShadow: maps.ShaperNone, KindHTB: maps.ShaperHTB, KindEDT: maps.ShaperEDT,
		KindPolice: maps.ShaperPolice, Kind("future"): maps.ShaperNone} {
		if got := kind.DataPathMode(); got != want {
			t.Errorf("%s: %v, want %v", kind, got, want)
		}
	}
	if (Shadow{}).Kind().DataPathMode() != maps.ShaperNone {
		t.Error("the shadow backend must hold nothing back")
	}
}
