package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/test/harness"
)

// coreTenant is the latency testbeds' protected tenant: a franz-go
// producer (client-id core, topic core) of rate requests a second of size
// bytes each, which records each request's latency itself (franz-go
// hooks). Each start is a new client process writing its own file; its
// errors are added to *errs when it stops.
type coreTenant struct {
	t           testing.TB
	w           *harness.World
	rate, bytes int
	errs        *int64
	seq         int
}

func newCoreTenant(t testing.TB, w *harness.World, rate, bytes int, errs *int64) *coreTenant {
	return &coreTenant{t: t, w: w, rate: rate, bytes: bytes, errs: errs}
}

// start runs a new core client; stop it with stop or stopInOrder.
func (c *coreTenant) start() (*harness.Client, string) {
	c.seq++
	out := filepath.Join(c.w.Dir, fmt.Sprintf("core-latency-%d.json", c.seq))
	return client(c.t, c.w, harness.ClientSpec{Name: fmt.Sprintf("core-%d", c.seq), Lib: "franz", Mode: "produce", ClientID: "core", Topic: "core",
		Rate: float64(c.rate * c.bytes), Args: []string{"-value-bytes", fmt.Sprint(c.bytes), "-latency-out", out}}), out
}

// stopInOrder stops a core client and returns its latencies (ms) in the
// order its requests completed.
func (c *coreTenant) stopInOrder(cl *harness.Client, out string) []float64 {
	c.t.Helper()
	cl.Stop() // flushes, then writes its latencies
	*c.errs += cl.Errors()
	data, err := os.ReadFile(out)
	if err != nil {
		c.t.Fatalf("the core client's latencies: %v", err)
	}
	var micros []float64
	if err := json.Unmarshal(data, &micros); err != nil {
		c.t.Fatal(err)
	}
	ms := make([]float64, len(micros))
	for i, v := range micros {
		ms[i] = v / 1000
	}
	return ms
}

// stop is stopInOrder, sorted.
func (c *coreTenant) stop(cl *harness.Client, out string) []float64 {
	ms := c.stopInOrder(cl, out)
	slices.Sort(ms)
	return ms
}

// restartWithObjective stops the agent of the weights-only runs and starts
// one whose configuration (config's, named "objective") gives core a
// produce latency objective of its alone p99 plus margin (ms); it returns
// the new agent (stopped at the test's end) and the objective in ms.
func restartWithObjective(t *testing.T, w *harness.World, a *harness.Agent, config func(name, objective string) string, aloneMs, marginMs float64) (*harness.Agent, float64) {
	t.Helper()
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	objective := time.Duration((aloneMs+marginMs)*1000) * time.Microsecond
	a, err := w.StartAgent(config("objective", fmt.Sprintf(", produce_latency_objective: {p99: %dus}", objective.Microseconds())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop() })
	return a, float64(objective.Microseconds()) / 1000
}
