package agent

import (
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/shaping"
)

// ShaperChoice is a built shaper backend and why it was chosen.
type ShaperChoice struct {
	Shaper   shaping.Shaper
	Reason   string
	IFBIndex int // the IFB device ingress is redirected to (0: none)
	// EgressIFBIndex is the IFB carrying the egress tree when htb drives
	// several interfaces (0: the tree sits on the one interface).
	EgressIFBIndex int
}

// ShaperFactory builds the backend a configuration asks for. The agent
// calls it at start and again on a reload that changes mode, shaper,
// produce_shaper or max_queue_delay, after closing the previous backend.
type ShaperFactory func(cfg config.Config) (ShaperChoice, error)

// shaperSpec is what of a configuration the backend depends on.
type shaperSpec struct {
	mode          config.Mode
	shaper        string
	produceShaper string
	delay         time.Duration
}

func specOf(cfg config.Config) shaperSpec {
	return shaperSpec{mode: cfg.Mode, shaper: cfg.Shaper, produceShaper: cfg.ProduceShaper, delay: cfg.MaxQueueDelay}
}

// shaperInUse is what the agent keeps of the backend's choice besides the
// backend itself (which the apply stage holds).
type shaperInUse struct {
	reason         string
	ifb, egressIFB int
}

// useShaper installs a backend and gives it the capacities and every rate
// in force (what it refuses is written again next cycle).
func (a *Agent) useShaper(c ShaperChoice) {
	a.shaper = shaperInUse{reason: c.Reason, ifb: c.IFBIndex, egressIFB: c.EgressIFBIndex}
	if err := a.rates.Use(c.Shaper, a.capacities(a.dirConfigs())); err != nil {
		a.log.Warn("the new shaper refused rates or capacities; written again next cycle or by the reload", "err", err)
	}
}
