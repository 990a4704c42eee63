package agent

import (
	"math"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/maps"
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

// useShaper installs a backend and gives it every rate in force.
func (a *Agent) useShaper(c ShaperChoice) {
	a.deps.Shaper, a.deps.ShaperReason, a.deps.IFBIndex, a.deps.EgressIFBIndex = c.Shaper, c.Reason, c.IFBIndex, c.EgressIFBIndex
	if err := a.applyCapacities(c.Shaper, a.dirConfigs()); err != nil {
		a.log.Warn("capacities for the new shaper; set again by the reload", "err", err)
	}
	for _, dc := range a.dirs {
		if !dc.cfg.Enabled() {
			continue
		}
		var rates []shaping.Rate
		for id, r := range dc.applied {
			if !math.IsNaN(r) { // a rate was decided
				rates = append(rates, shaping.Rate{Entity: uint32(id), BytesPerSecond: r, Guaranteed: dc.guaranteed[id]})
			}
		}
		if err := c.Shaper.SetRates(maps.Direction(dc.dir), rates); err != nil {
			a.log.Warn("rates for the new shaper; written again next cycle", "direction", dc.dir.String(), "err", err)
			for _, r := range rates {
				dc.applied[r.Entity] = math.NaN()
			}
		}
	}
}
