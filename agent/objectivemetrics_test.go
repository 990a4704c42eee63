package agent

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-dev/sluice/maps"
)

// gaugeOf finds one gauge's value among gathered families by name and
// label values (in any order); ok false when absent.
func gaugeOf(families []*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue metrics
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// The objective's judged p99, target, requests and decision, the cap on
// best-effort traffic and what it took from the backfill are exported;
// before the breaker opens the cap is +Inf and nothing is taken.
func TestObjectiveGauges(t *testing.T) {
	r := newRig(t, "entities: {clients: {core: {producer_byte_reservation: 100, produce_latency_objective: {p99: 50ms}}, bulk: {}}}\n")
	core := r.learn(46000, "core", apiVersions())
	bulk := r.learn(46001, "bulk", apiVersions())
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.a.objectiveCollector())
	bytes := map[maps.Binding]uint64{core: 100, bulk: 800}
	r.cycle()
	stepProduce(r, bytes, map[maps.Binding]time.Duration{core: 5 * time.Millisecond})
	gathered := func() []*dto.MetricFamily {
		f, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	obj := map[string]string{"direction": "produce", "entity_type": "client", "entity": "core"}
	f := gathered()
	if v, _ := gaugeOf(f, "sluice_latency_objective_target_seconds", obj); v != 0.05 {
		t.Errorf("target %v, want 0.05", v)
	}
	if v, _ := gaugeOf(f, "sluice_latency_objective_judged", obj); v != 1 {
		t.Errorf("judged %v with 30 requests, want 1", v)
	}
	if v, _ := gaugeOf(f, "sluice_latency_objective_p99_seconds", obj); math.Abs(v-0.005)/0.005 > 0.13 {
		t.Errorf("judged p99 %v, want about 5 ms", v)
	}
	if v, ok := gaugeOf(f, "sluice_latency_objective_best_effort_cap_bytes_per_second", map[string]string{"direction": "produce"}); !ok || !math.IsInf(v, 1) {
		t.Errorf("cap %v (present %v) while nothing holds, want +Inf", v, ok)
	}
	if _, ok := gaugeOf(f, "sluice_latency_objective_trimmed_bytes_per_second", map[string]string{"entity": "bulk"}); ok {
		t.Error("bulk reported trimmed while nothing holds")
	}
	for i := 0; i < 40; i++ {
		if s := stepProduce(r, bytes, map[maps.Binding]time.Duration{core: 200 * time.Millisecond}); s.Objectives[0].State == "open" {
			break
		}
	}
	f = gathered()
	cap, _ := gaugeOf(f, "sluice_latency_objective_best_effort_cap_bytes_per_second", map[string]string{"direction": "produce"})
	taken, ok := gaugeOf(f, "sluice_latency_objective_trimmed_bytes_per_second", map[string]string{"direction": "produce", "entity": "bulk"})
	sum, _ := gaugeOf(f, "sluice_latency_objective_best_effort_trimmed_bytes_per_second", map[string]string{"direction": "produce"})
	limit := float64(entityView(r.a.Snapshot(), 0, "bulk").DynamicLimit)
	if math.Abs(cap-640) > 1 || !ok || taken <= 0 || math.Abs(sum-taken) > 1e-9 || math.Abs(limit-640) > 1 {
		t.Errorf("held at 0.8 of 800: cap %v, bulk's limit %v, taken from bulk %v (present %v), summed %v", cap, limit, taken, ok, sum)
	}
	if v, _ := gaugeOf(f, "sluice_latency_objective_p99_seconds", obj); v < 0.15 {
		t.Errorf("judged p99 %v while core's requests take 200 ms", v)
	}
}
