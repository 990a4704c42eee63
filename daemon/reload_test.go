package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent"
	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/internal/metricslistener"
)

// fakeTarget is the agent as a reload sees it: it applies what it is given
// unless refuse says otherwise, and keeps the verdicts it is given.
type fakeTarget struct {
	cfg      config.Config
	refuse   error
	applied  int
	verdicts []status.ReloadResult
}

func (f *fakeTarget) Config() config.Config { return f.cfg }
func (f *fakeTarget) Reload(next config.Config) error {
	if f.refuse != nil {
		return f.refuse
	}
	f.cfg = next
	f.applied++
	return nil
}
func (f *fakeTarget) NoteReload(r status.ReloadResult) { f.verdicts = append(f.verdicts, r) }

// reloadRig is a reloader over a fake agent and a metrics listener whose
// open addresses are counted.
type reloadRig struct {
	*reloader
	target *fakeTarget
	open   map[string]bool // metrics listeners open, by address
	level  *slog.LevelVar
	logs   *bytes.Buffer
	fail   string // the step the fault hook fails
}

func newReloadRig(t *testing.T) *reloadRig {
	t.Helper()
	first := config.Default()
	first.MetricsAddress, first.LogLevel, first.RefreshInterval = "127.0.0.1:9101", slog.LevelInfo, time.Second
	r := &reloadRig{target: &fakeTarget{cfg: first}, open: map[string]bool{}, level: new(slog.LevelVar), logs: new(bytes.Buffer)}
	listener := metricslistener.New(func(addr, _ string) (func(), error) {
		if addr == "busy:1" {
			return nil, errors.New("address already in use")
		}
		r.open[addr] = true
		return func() { delete(r.open, addr) }, nil
	})
	if err := listener.Open(first); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(listener.Close)
	fault := func(step string) error {
		if step == r.fail {
			return errors.New("injected fault")
		}
		return nil
	}
	r.reloader = newReloader(r.target, listener, r.level, fault, slog.New(slog.NewTextHandler(r.logs, nil)))
	r.now = func() time.Time { return time.Unix(1_000_000, 0) }
	return r
}

// with is the running configuration with one change.
func (r *reloadRig) with(change func(*config.Config)) config.Config {
	c := r.target.Config()
	change(&c)
	return c
}

func (r *reloadRig) openAddrs() string { return fmt.Sprint(r.open) }

// An applied reload moves what the process owns with it: the metrics
// listener (the new one open before the old closes), the log level and the
// loop's ticker; the agent publishes an applied verdict that says why.
func TestReloadAppliedMovesTheProcessWithIt(t *testing.T) {
	r := newReloadRig(t)
	next := r.with(func(c *config.Config) {
		c.MetricsAddress, c.LogLevel, c.RefreshInterval = "127.0.0.1:19999", slog.LevelDebug, 250*time.Millisecond
	})
	res := r.run("SIGHUP", next, nil)
	if !res.Applied || res.Error != "" || res.Why != "SIGHUP" || !res.At.Equal(time.Unix(1_000_000, 0)) {
		t.Errorf("verdict %+v", res)
	}
	if len(r.target.verdicts) != 1 || r.target.verdicts[0] != res {
		t.Errorf("the agent was given %+v, want the verdict", r.target.verdicts)
	}
	if r.open["127.0.0.1:9101"] || !r.open["127.0.0.1:19999"] || len(r.open) != 1 {
		t.Errorf("metrics listeners open %s, want only the new address", r.openAddrs())
	}
	if r.level.Level() != slog.LevelDebug {
		t.Errorf("log level %v, want debug", r.level.Level())
	}
	select {
	case d := <-r.interval:
		if d != 250*time.Millisecond {
			t.Errorf("the ticker was told %v, want 250ms", d)
		}
	default:
		t.Error("the ticker was not told of the new refresh_interval")
	}
	// Two changes before the loop reads: the latest wins, nothing blocks.
	r.run("file changed", r.with(func(c *config.Config) { c.RefreshInterval = 2 * time.Second }), nil)
	r.run("file changed", r.with(func(c *config.Config) { c.RefreshInterval = 3 * time.Second }), nil)
	if d := <-r.interval; d != 3*time.Second || len(r.interval) != 0 {
		t.Errorf("the ticker was told %v (%d more waiting), want the latest, 3s", d, len(r.interval))
	}
	// The same interval again tells the ticker nothing.
	r.run("SIGHUP", r.target.Config(), nil)
	if len(r.interval) != 0 {
		t.Error("an unchanged refresh_interval reached the ticker")
	}
}

// A refused reload moves nothing the process owns: a file that does not
// parse never reaches the agent; a listener that cannot open refuses it
// before the agent is asked; one opened for a reload the agent refuses is
// closed again. Each refusal is published, logged and says whether the
// running state is as before.
func TestReloadRefusedMovesNothing(t *testing.T) {
	for _, c := range []struct {
		name    string
		next    func(*config.Config)
		loadErr error
		refuse  error
		fail    string
		partly  bool
		says    []string
	}{
		{name: "file does not parse", loadErr: errors.New("produce.capacity: must be finite"),
			says: []string{"produce.capacity", "nothing changed"}},
		{name: "listener cannot open", next: func(c *config.Config) { c.MetricsAddress = "busy:1" },
			says: []string{"metrics listener: metrics_address", "address already in use", "nothing changed"}},
		{name: "metrics step faulted", next: func(c *config.Config) { c.MetricsAddress = "127.0.0.1:20001" }, fail: stepMetricsListener,
			says: []string{"metrics listener: injected fault", "nothing changed"}},
		{name: "agent refuses", next: func(c *config.Config) { c.MetricsAddress = "127.0.0.1:20001" },
			refuse: errors.New("allocators: memory_cycles must be positive; every change was undone"),
			says:   []string{"memory_cycles", "every change was undone"}},
		{name: "agent's undo failed", next: func(c *config.Config) { c.MetricsAddress = "127.0.0.1:20001" },
			refuse: fmt.Errorf("swap: injected fault; %w: rebuild the previous shaper: no IFB", agent.ErrUndoFailed), partly: true,
			says: []string{"undo failed"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newReloadRig(t)
			r.target.refuse, r.fail = c.refuse, c.fail
			next := r.target.Config()
			if c.next != nil {
				next = r.with(c.next)
			}
			next.LogLevel, next.RefreshInterval = slog.LevelDebug, 5*time.Second
			res := r.run("sluice reload", next, c.loadErr)
			if res.Applied || res.PartlyApplied != c.partly {
				t.Errorf("verdict %+v, want refused, partly applied %v", res, c.partly)
			}
			for _, s := range c.says {
				if !strings.Contains(res.Error, s) {
					t.Errorf("the verdict %q does not say %q", res.Error, s)
				}
			}
			if len(r.target.verdicts) != 1 || r.target.verdicts[0] != res {
				t.Errorf("the agent was given %+v, want the verdict", r.target.verdicts)
			}
			if r.target.applied != 0 || r.target.Config().MetricsAddress != "127.0.0.1:9101" {
				t.Errorf("the agent applied %d reloads; metrics_address in force %s", r.target.applied, r.target.Config().MetricsAddress)
			}
			if !r.open["127.0.0.1:9101"] || len(r.open) != 1 {
				t.Errorf("metrics listeners open %s, want only the old address", r.openAddrs())
			}
			if r.level.Level() != slog.LevelInfo || len(r.interval) != 0 {
				t.Errorf("log level %v, ticker changes waiting %d: a refused reload moved them", r.level.Level(), len(r.interval))
			}
			if !strings.Contains(r.logs.String(), "configuration reload refused") {
				t.Errorf("the refusal was not logged:\n%s", r.logs)
			}
		})
	}
}

// The steps a fault-injection build can fail are the daemon's and then
// the agent's, each named once.
func TestReloadStepNames(t *testing.T) {
	if ReloadStepNames[0] != stepMetricsListener || len(ReloadStepNames) != len(agent.ReloadStepNames)+1 {
		t.Fatalf("steps %q", ReloadStepNames)
	}
	seen := map[string]bool{}
	for _, s := range ReloadStepNames {
		if seen[s] {
			t.Errorf("step %q named twice", s)
		}
		seen[s] = true
	}
}
