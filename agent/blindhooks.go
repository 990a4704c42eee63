package agent

import (
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/agent/attach"
	"github.com/sluice-dev/sluice/agent/status"
)

// Blind hooks (#48): sluice attaches after the programs already on a hook
// (attach_position: last), so a CNI ahead of it that passes traffic with
// TC_ACT_OK (as Cilium does) ends the chain before sluice sees anything,
// and sluice would count, learn and shape nothing without a word. The
// agent reads each hook at start and every cycle, because another tool can
// attach ahead of sluice at any time (a CNI restarting with BPF_F_BEFORE,
// an operator's filter at a low pref), and says so in status, in a metric
// and in the log.

// HookInspector reads what runs ahead of sluice's programs on each hook it
// is attached to. The daemon gives the agent its attachments
// (AttachedHooks); nil: nothing is read.
type HookInspector interface {
	Inspect() (status.HooksView, error)
}

// AttachedHooks inspects the attachments' hooks; position is
// attach_position, as status shows it. in runs the netlink and BPF queries
// in the attachments' network namespace (nil: the calling thread's).
func AttachedHooks(atts []*attach.Attachment, position string, in func(func() error) error) HookInspector {
	if in == nil {
		in = func(fn func() error) error { return fn() }
	}
	return attachedHooks{atts: slices.Clone(atts), position: position, in: in}
}

type attachedHooks struct {
	atts     []*attach.Attachment
	position string
	in       func(func() error) error
}

func (h attachedHooks) Inspect() (status.HooksView, error) {
	v := status.HooksView{Position: h.position, Hooks: []status.HookView{}}
	err := h.in(func() error {
		for _, a := range h.atts {
			ahead, err := a.Ahead()
			if err != nil {
				return err
			}
			for _, hook := range []string{"ingress", "egress"} {
				hv := status.HookView{Interface: a.Interface, Hook: hook}
				for _, x := range ahead {
					if x.Hook != hook {
						continue
					}
					hv.Ahead = append(hv.Ahead, status.AheadView{Kind: x.Kind, Name: x.Name, ProgramID: x.ProgramID, Pref: x.Pref,
						EndsChain: x.EndsChain, Verdict: x.Verdict})
					hv.Blind = hv.Blind || x.EndsChain
				}
				if hv.Blind {
					v.Blind++
				}
				v.Hooks = append(v.Hooks, hv)
			}
		}
		return nil
	})
	return v, err
}

// blindHooks keeps the last reading for status and metrics, and logs each
// change in what blinds sluice.
type blindHooks struct {
	mu       sync.Mutex
	last     *status.HooksView
	failures uint64
	lastErr  string
	// said is what was last logged (the blind hooks and what blinds them),
	// so that a steady state is logged once, not every cycle.
	said string
}

// check reads the hooks (every cycle, and at start). A failed reading is
// counted and keeps the last good one, marked with the error.
func (b *blindHooks) check(insp HookInspector, log *slog.Logger) {
	if insp == nil {
		return
	}
	v, err := insp.Inspect()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.failures++
		if b.lastErr == "" && log != nil {
			log.Warn("could not read what runs ahead of sluice on its hooks", "err", err)
		}
		b.lastErr = err.Error()
		return
	}
	b.lastErr = ""
	b.last = &v
	said := blindSummary(v)
	if said == b.said || log == nil {
		b.said = said
		return
	}
	b.said = said
	if v.Blind == 0 {
		log.Info("no program or filter ahead of sluice can end its hooks' chains", "position", v.Position)
		return
	}
	for _, h := range v.Hooks {
		if !h.Blind {
			continue
		}
		var ends []string
		for _, x := range h.Ahead {
			if x.EndsChain {
				ends = append(ends, x.Kind+" "+x.Name+": "+x.Verdict)
			}
		}
		log.Warn("blind: a program ahead of sluice on this hook can end the chain; segments it passes, redirects or drops are not counted, learned or shaped (attach_position: first puts sluice ahead of it)",
			"interface", h.Interface, "hook", h.Hook, "position", v.Position, "ahead", strings.Join(ends, "; "))
	}
}

// blindSummary names the blind hooks and what blinds them.
func blindSummary(v status.HooksView) string {
	var b strings.Builder
	for _, h := range v.Hooks {
		if !h.Blind {
			continue
		}
		b.WriteString(h.Interface + "/" + h.Hook + ":")
		for _, x := range h.Ahead {
			if x.EndsChain {
				b.WriteString(" " + x.Kind + "=" + x.Name)
			}
		}
		b.WriteString(";")
	}
	return b.String()
}

// view is the last reading for the snapshot (nil: none yet).
func (b *blindHooks) view() *status.HooksView {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last == nil && b.failures == 0 {
		return nil
	}
	v := status.HooksView{}
	if b.last != nil {
		v = *b.last
		v.Hooks = slices.Clone(b.last.Hooks)
	}
	v.CheckFailures, v.LastError = b.failures, b.lastErr
	return &v
}

// blindHooksCollector exports the hooks' reading from the agent's
// snapshot; it exports nothing before the first reading.
type blindHooksCollector struct {
	snapshot               func() *status.Snapshot
	blind, ahead, failures *prometheus.Desc
}

func newBlindHooksCollector(a *Agent) *blindHooksCollector { return blindHooksFrom(a.Snapshot) }

// blindHooksFrom reads the snapshots snapshot returns.
func blindHooksFrom(snapshot func() *status.Snapshot) *blindHooksCollector {
	hook := []string{"interface", "hook"}
	return &blindHooksCollector{snapshot: snapshot,
		blind: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "blind_hooks"),
			"1 for a hook (an interface's ingress or egress) where a program or filter of another tool runs ahead of sluice's and its verdict can end the chain (or sluice's program is gone from it): what it ends, sluice never counts, learns or shapes. 0 otherwise.", hook, nil),
		ahead: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "hook_programs_ahead"),
			"Programs and filters of other tools that run ahead of sluice's on the hook, whether or not they can end the chain.", hook, nil),
		failures: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "blind_hook_check_failures_total"),
			"Readings of the hooks (at start and every cycle) that failed; sluice_blind_hooks keeps the last good one.", nil, nil),
	}
}

func (c *blindHooksCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.blind
	ch <- c.ahead
	ch <- c.failures
}

func (c *blindHooksCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	if s == nil || s.Hooks == nil {
		return
	}
	for _, h := range s.Hooks.Hooks {
		ch <- prometheus.MustNewConstMetric(c.blind, prometheus.GaugeValue, boolValue(h.Blind), h.Interface, h.Hook)
		ch <- prometheus.MustNewConstMetric(c.ahead, prometheus.GaugeValue, float64(len(h.Ahead)), h.Interface, h.Hook)
	}
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(s.Hooks.CheckFailures))
}
