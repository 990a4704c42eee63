package agent

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/configfile"
)

// The data path is told both IFBs of a shared tree, at start and after a
// reload rebuilds the shaper; a shaper with one tree leaves the egress one 0.
func TestAgentWritesBothIFBsOfASharedTree(t *testing.T) {
	cfg, err := configfile.Parse([]byte(baseConfig))
	if err != nil {
		t.Fatal(err)
	}
	dp := newFakeDataPath()
	egress := 8
	deps := Deps{DataPath: dp, Clock: &fakeClock{t: time.Unix(1_000_000, 0)},
		NewShaper: func(config.Config) (ShaperChoice, error) {
			return ShaperChoice{Shaper: newFakeShaper(), IFBIndex: 7, EgressIFBIndex: egress}, nil
		}}
	a, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Cycle(); err != nil {
		t.Fatal(err)
	}
	if dp.settings.IFBIndex != 7 || dp.settings.EgressIFBIndex != 8 {
		t.Errorf("settings at start: IFBs %d, %d, want 7, 8", dp.settings.IFBIndex, dp.settings.EgressIFBIndex)
	}
	egress = 0
	next := cfg
	next.MaxQueueDelay = cfg.MaxQueueDelay * 2 // rebuilds the shaper
	if err := a.Reload(next); err != nil {
		t.Fatal(err)
	}
	if err := a.Cycle(); err != nil {
		t.Fatal(err)
	}
	if dp.settings.IFBIndex != 7 || dp.settings.EgressIFBIndex != 0 {
		t.Errorf("settings after the rebuild: IFBs %d, %d, want 7, 0", dp.settings.IFBIndex, dp.settings.EgressIFBIndex)
	}
}
