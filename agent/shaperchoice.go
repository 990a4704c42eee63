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

// specInForce is what the running backend does, judged by the data path's
// settings rather than by the configuration that asked for it. The two
// differ after an undo could not rebuild the shaper (nothing holds traffic
// back while the file says enforce): the spec in force then names the data
// path's mode, which no configuration's spec equals, so the next reload,
// even of the same file, runs the shaper step and builds the backend again
// instead of finding nothing changed.
func (a *Agent) specInForce() shaperSpec {
	spec := specOf(a.cfg)
	if running := a.runningMode(); running != string(spec.mode) {
		spec.mode = config.Mode("data path: " + running)
	}
	return spec
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
	a.host.shaper = shaperInUse{reason: c.Reason, ifb: c.IFBIndex, egressIFB: c.EgressIFBIndex}
	if err := a.rates.Use(c.Shaper, a.capacities(a.dirConfigs())); err != nil {
		a.log.Warn("the new shaper refused rates or capacities; written again next cycle or by the reload", "err", err)
	}
}
