package daemon

import (
	"fmt"

	"github.com/sluice-dev/sluice/agent"
	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/shaper"
	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/maps"
)

// autoReason is why auto picks htb, for the log and `sluice status`.
const autoReason = "auto: htb holds reservations and capacity between cycles on every kernel and is measured by make shaping-check; " +
	"edt is not chosen until it has passed shaping-check on a host with fq (docs/edt-manual-check.md)"

// ChooseShaper is the factory of a real host: shadow mode holds nothing
// back; auto picks htb, which works on every kernel and is the backend
// measured carrying traffic (make shaping-check). edt stays selectable but
// is not auto's choice until it has passed shaping-check on a host with
// fq: on ingress a departure time written before the redirect to the IFB
// may not survive it (docs/edt-manual-check.md). police is a last-resort
// hard cap. edt drives one interface; htb drives one, or several through
// one shared tree per direction (shaper.NewSharedHTB).
func ChooseShaper(cfg config.Config, dp *maps.Datapath, ifindexes []int) (agent.ShaperChoice, error) {
	if shapesWithoutTrees(cfg) {
		// Trees an earlier agent left (keep_attached_on_exit) would hold
		// nothing back here, but stay in every packet's way.
		for _, idx := range ifindexes {
			if err := shaper.RemoveLeftoverTrees(idx, nil); err != nil {
				return agent.ShaperChoice{}, err
			}
		}
	}
	if cfg.Mode == config.ModeShadow || cfg.Shaper == "shadow" {
		return agent.ShaperChoice{Shaper: shaping.Shadow{}, Reason: "mode shadow: count and compute, hold nothing back"}, nil
	}
	if cfg.Shaper == "police" {
		return agent.ShaperChoice{Shaper: shaper.NewPolice(dp), Reason: "configured (a hard cap: greedy TCP retransmits under it)"}, nil
	}
	if len(ifindexes) == 0 {
		return agent.ShaperChoice{}, fmt.Errorf("interfaces: the %s shaper needs an interface", cfg.Shaper)
	}
	reason := "configured"
	if cfg.Shaper == "auto" {
		reason = autoReason
	}
	if cfg.ReplaceRootQdisc {
		for _, idx := range ifindexes {
			replaced, err := shaper.ReplaceForeignRoot(idx, nil)
			if err != nil {
				return agent.ShaperChoice{}, err
			}
			if replaced != "" {
				reason += "; replaced the operator's root " + replaced + " (replace_root_qdisc: the kernel's default comes back when sluice's tree goes)"
			}
		}
	}
	if len(ifindexes) > 1 {
		if cfg.Shaper == "edt" {
			return agent.ShaperChoice{}, fmt.Errorf("interfaces: the edt shaper drives one interface, %d are configured; use htb or auto", len(ifindexes))
		}
		h, err := shaper.NewSharedHTB(ifindexes, dp, cfg.MaxQueueDelay, dp.EgressSelectProgram(), nil)
		if err != nil {
			return agent.ShaperChoice{}, err
		}
		return splitIfAsked(cfg, dp, agent.ShaperChoice{Shaper: h, Reason: reason + "; one tree per direction shared by every interface",
			IFBIndex: h.IFBIndex(), EgressIFBIndex: h.EgressIFBIndex()})
	}
	idx := ifindexes[0]
	if cfg.Shaper == "edt" {
		if fqErr := shaper.ProbeFQ(nil); fqErr != nil {
			return agent.ShaperChoice{}, fmt.Errorf("shaper: edt needs the fq qdisc: %v; use htb or auto", fqErr)
		}
		e, err := shaper.NewEDT(idx, dp, nil)
		if err != nil {
			return agent.ShaperChoice{}, err
		}
		return agent.ShaperChoice{Shaper: e, Reason: "configured (unmeasured here: see docs/edt-manual-check.md)", IFBIndex: e.IFBIndex()}, nil
	}
	h, err := shaper.NewHTB(idx, dp, cfg.MaxQueueDelay, nil)
	if err != nil {
		return agent.ShaperChoice{}, err
	}
	return splitIfAsked(cfg, dp, agent.ShaperChoice{Shaper: h, Reason: reason, IFBIndex: h.IFBIndex()})
}

// splitIfAsked pairs the htb backend with police for produce when
// produce_shaper: police asks for it (shaper.Split), closing the htb
// backend if that fails.
func splitIfAsked(cfg config.Config, dp *maps.Datapath, c agent.ShaperChoice) (agent.ShaperChoice, error) {
	if cfg.ProduceShaper != config.ProduceShaperPolice {
		return c, nil
	}
	h := c.Shaper.(*shaper.HTB)
	s, err := shaper.NewSplit(h, shaper.NewPolice(dp))
	if err != nil {
		h.Close()
		return agent.ShaperChoice{}, err
	}
	c.Shaper = s
	c.Reason += "; produce policed in place (produce_shaper: police): every later ingress hook sees it"
	return c, nil
}

// shapesWithoutTrees: the configuration's backend uses no qdisc tree.
func shapesWithoutTrees(cfg config.Config) bool {
	return cfg.Mode == config.ModeShadow || cfg.Shaper == "shadow" || cfg.Shaper == "police"
}
