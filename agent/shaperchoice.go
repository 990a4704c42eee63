package agent

import (
	"fmt"
	"math"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/shaper"
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
// calls it at start and again on a reload that changes mode, shaper or
// max_queue_delay, after closing the previous backend.
type ShaperFactory func(cfg config.Config) (ShaperChoice, error)

// shaperSpec is what of a configuration the backend depends on.
type shaperSpec struct {
	mode   config.Mode
	shaper string
	delay  time.Duration
}

func specOf(cfg config.Config) shaperSpec {
	return shaperSpec{mode: cfg.Mode, shaper: cfg.Shaper, delay: cfg.MaxQueueDelay}
}

// ChooseShaper is the factory of a real host: shadow mode holds nothing
// back; auto picks htb, which works on every kernel and is the backend
// measured carrying traffic (make shaping-check). edt stays selectable but
// is not auto's choice until it has passed shaping-check on a host with
// fq: on ingress a departure time written before the redirect to the IFB
// may not survive it (docs/edt-manual-check.md). police is a last-resort
// hard cap. edt drives one interface; htb drives one, or several through
// one shared tree per direction (shaper.NewSharedHTB).
func ChooseShaper(cfg config.Config, dp *maps.Datapath, ifindexes []int) (ShaperChoice, error) {
	if shapesWithoutTrees(cfg) {
		// Trees an earlier agent left (keep_attached_on_exit) would hold
		// nothing back here, but stay in every packet's way.
		for _, idx := range ifindexes {
			if err := shaper.RemoveLeftoverTrees(idx, nil); err != nil {
				return ShaperChoice{}, err
			}
		}
	}
	if cfg.Mode == config.ModeShadow || cfg.Shaper == "shadow" {
		return ShaperChoice{Shaper: shaping.Shadow{}, Reason: "mode shadow: count and compute, hold nothing back"}, nil
	}
	if cfg.Shaper == "police" {
		return ShaperChoice{Shaper: shaper.NewPolice(dp), Reason: "configured (a hard cap: greedy TCP retransmits under it)"}, nil
	}
	if len(ifindexes) == 0 {
		return ShaperChoice{}, fmt.Errorf("interfaces: the %s shaper needs an interface", cfg.Shaper)
	}
	reason := "configured"
	if cfg.Shaper == "auto" {
		reason = autoReason
	}
	if len(ifindexes) > 1 {
		if cfg.Shaper == "edt" {
			return ShaperChoice{}, fmt.Errorf("interfaces: the edt shaper drives one interface, %d are configured; use htb or auto", len(ifindexes))
		}
		h, err := shaper.NewSharedHTB(ifindexes, dp, cfg.MaxQueueDelay, dp.EgressSelectProgram(), nil)
		if err != nil {
			return ShaperChoice{}, err
		}
		return ShaperChoice{Shaper: h, Reason: reason + "; one tree per direction shared by every interface", IFBIndex: h.IFBIndex(), EgressIFBIndex: h.EgressIFBIndex()}, nil
	}
	idx := ifindexes[0]
	if cfg.Shaper == "edt" {
		if fqErr := shaper.ProbeFQ(nil); fqErr != nil {
			return ShaperChoice{}, fmt.Errorf("shaper: edt needs the fq qdisc: %v; use htb or auto", fqErr)
		}
		e, err := shaper.NewEDT(idx, dp, nil)
		if err != nil {
			return ShaperChoice{}, err
		}
		return ShaperChoice{Shaper: e, Reason: "configured (unmeasured here: see docs/edt-manual-check.md)", IFBIndex: e.IFBIndex()}, nil
	}
	h, err := shaper.NewHTB(idx, dp, cfg.MaxQueueDelay, nil)
	if err != nil {
		return ShaperChoice{}, err
	}
	return ShaperChoice{Shaper: h, Reason: reason, IFBIndex: h.IFBIndex()}, nil
}

// autoReason is why auto picks htb, for the log and `sluice status`.
const autoReason = "auto: htb holds reservations and capacity between cycles on every kernel and is measured by make shaping-check; " +
	"edt is not chosen until it has passed shaping-check on a host with fq (docs/edt-manual-check.md)"

// shapesWithoutTrees: the configuration's backend uses no qdisc tree.
func shapesWithoutTrees(cfg config.Config) bool {
	return cfg.Mode == config.ModeShadow || cfg.Shaper == "shadow" || cfg.Shaper == "police"
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
