package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/entity"
	sluicemaps "github.com/sluice-dev/sluice/maps"
)

// The configuration a reload starts from: enforcing (htb), a TLS listener
// with a peer prefix, an exempt range, a configured client and a metadata
// client.
const txBefore = `
interfaces: [eth0]
listeners: [9092, {port: 9093, protocol: SSL}]
bootstrap: [198.18.0.1:9092]
metrics_address: 127.0.0.1:9101
refresh_interval: 1s
rate_window: 1
log_level: info
samples_per_second: 100
exempt_peers: [10.0.0.0/8]
produce: {capacity: 1000, safety_ratio: 1, activity_threshold: 0, memory_cycles: 3, min_limit: 0}
fetch:   {capacity: 1000, safety_ratio: 0.9, activity_threshold: 0, memory_cycles: 3, min_limit: 0}
entities:
  clients: {alpha: {producer_byte_rate: 300}}
  peers: {198.18.1.0/24: {consumer_byte_rate: 400}}
  listeners: {9093: {consumer_byte_rate: 100}}
`

// The configuration that changes every live key: the shaper (to shadow),
// listeners (another TLS port), the metadata client, the metrics address
// and log level (which the daemon moves), the interval, the sample budget,
// capacities, exempt ranges, entities and peer prefixes.
const txNext = `
interfaces: [eth0]
mode: shadow
listeners: [9092, {port: 9094, protocol: SSL}]
bootstrap: [198.18.0.9:9092]
metrics_address: 127.0.0.1:9102
refresh_interval: 2s
rate_window: 1
log_level: debug
samples_per_second: 50
max_unconfigured_entities: 500
exempt_peers: [10.0.0.0/8, 192.0.2.0/24, 198.18.0.2/32]
produce: {capacity: 2000, safety_ratio: 1, activity_threshold: 0, memory_cycles: 3, min_limit: 0}
fetch:   {capacity: 1500, safety_ratio: 0.9, activity_threshold: 0, memory_cycles: 3, min_limit: 0}
entities:
  clients: {alpha: {producer_byte_rate: 600}, beta: {consumer_byte_rate: 200}}
  peers: {198.18.1.0/24: {consumer_byte_rate: 400}, 198.18.2.0/24: {consumer_byte_rate: 250}}
  listeners: {9094: {consumer_byte_rate: 150}}
`

// txRig is a rig with every edge the agent's reload moves: a storing data
// path, a shaper factory and a metadata factory whose live objects are
// counted. (The metrics listener, log level and ticker are the daemon's:
// daemon/reload_test.go.)
type txRig struct {
	*rig
	store    *storingDataPath
	metadata map[string]bool // live metadata clients by bootstrap
	metrics  *Metrics
	fail     string // the step FailReloadStep fails
	visited  []string
}

func newTxRig(t *testing.T) *txRig {
	t.Helper()
	tr := &txRig{store: newStoringDataPath(), metadata: map[string]bool{}}
	tr.rig = newRigWith(t, txBefore, func(d *Deps) {
		d.DataPath = tr.store
		d.NewMetadata = func(c config.Config) (Metadata, error) {
			if tr.rig != nil && tr.faults.hit("NewMetadata") { // nil while New runs
				return Metadata{}, errPartway
			}
			addr := strings.Join(c.Bootstrap, ",")
			tr.metadata[addr] = true
			return Metadata{Stop: func() { delete(tr.metadata, addr) }}, nil
		}
		d.FailReloadStep = func(step string) error {
			tr.visited = append(tr.visited, step)
			if step == tr.fail {
				return errors.New("injected fault")
			}
			return nil
		}
	})
	tr.dp = tr.store.fakeDataPath
	tr.metrics = NewMetrics(tr.a, tr.store, MetricsInfo{})
	// Connections: a client learned by its id, one the TLS listener's
	// peer table holds, and an exempt peer's.
	tr.learn(40000, "alpha", apiVersions())
	tr.learn(40001, "someone", apiVersions())
	tls := tlsConn("198.18.1.9", 50001)
	peer, _ := tr.a.registry.Lookup(entity.Key{Kind: entity.KindPeer, Name: "198.18.1.0/24"})
	tr.dp.bindings[tls] = sluicemaps.Binding{Conn: tls, Produce: uint32(peer), Fetch: uint32(peer)}
	exempt := sluicemaps.ConnKey{Peer: netip.MustParseAddrPort("10.1.2.3:40500"), Local: brokerAddr}
	tr.dp.bindings[exempt] = sluicemaps.Binding{Conn: exempt, Produce: sluicemaps.NotGoverned, Fetch: sluicemaps.NotGoverned}
	tr.dp.add(sluicemaps.Produce, tr.dp.bindings[conn(40000)].Produce, 5000)
	tr.cycle()
	tr.dp.add(sluicemaps.Produce, tr.dp.bindings[conn(40000)].Produce, 5000)
	tr.cycle()
	return tr
}

// state is everything a reload may change, as text: the data path's
// tables and settings, the shaper in use, the registry and the persisted
// names, the policy, the configuration and allocators in force, the
// metadata clients alive, status and metrics (but for the reload's own
// verdict and counters, which the daemon gives).
func (tr *txRig) state(t *testing.T) map[string]string {
	t.Helper()
	a := tr.a
	out := map[string]string{}
	put := func(k string, v any) {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		out[k] = string(data)
	}
	var bindings []string
	for _, b := range tr.dp.bindings {
		bindings = append(bindings, fmt.Sprintf("%v", b))
	}
	sort.Strings(bindings)
	put("data path: bindings", bindings)
	put("data path: settings", tr.dp.settings)
	put("data path: listeners", sortedPorts(tr.dp.listeners))
	put("data path: exempt", fmt.Sprint(tr.dp.exempt))
	put("data path: peer entities", fmt.Sprint(tr.dp.peers))
	put("data path: entity names", fmt.Sprint(tr.store.names))
	if sh, ok := a.rates.Shaper().(*fakeShaper); ok {
		put("shaper", map[string]any{"kind": sh.Kind(), "rates": fmt.Sprint(sh.rates), "guaranteed": fmt.Sprint(sh.guaranteed),
			"capacity": fmt.Sprint(sh.capacity), "closed": sh.closed, "ifb": []int{a.host.shaper.ifb, a.host.shaper.egressIFB}})
	} else { // the fallback after an undo could not build one
		put("shaper", map[string]any{"kind": a.rates.Shaper().Kind(), "reason": a.host.shaper.reason, "ifb": []int{a.host.shaper.ifb, a.host.shaper.egressIFB}})
	}
	var reg []string
	a.registry.Each(func(id entity.ID, k entity.Key) {
		reg = append(reg, fmt.Sprintf("%d %v pinned=%v", id, k, a.registry.Pinned(id)))
	})
	put("registry", map[string]any{"entities": reg, "unconfigured": a.registry.Unconfigured(), "overflowed": a.registry.Overflowed})
	var params []string
	for _, k := range a.limits.Policy().ConfiguredKeys() {
		for _, d := range entity.Directions {
			params = append(params, fmt.Sprintf("%v %v %+v", k, d, a.limits.Policy().Params(k, d)))
		}
	}
	sort.Strings(params)
	put("policy", params)
	put("learner policy is the agent's", a.identity.learner.Policy() == a.limits.Policy())
	put("config", fmt.Sprintf("%+v", a.cfg))
	put("allocators", fmt.Sprintf("%+v %+v %+v %+v", a.dirs[0].cfg, a.dirs[0].alloc.Config(), a.dirs[1].cfg, a.dirs[1].alloc.Config()))
	put("tls ports", fmt.Sprint(a.identity.tlsPorts))
	put("metadata clients", fmt.Sprint(tr.metadata))
	a.mu.Lock()
	a.published.snapshot = nil
	a.mu.Unlock()
	snap := *a.Snapshot()
	snap.LastReload = nil
	put("status", snap)
	families, err := tr.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "sluice_") || strings.Contains(f.GetName(), "reload") {
			continue // the runtime's, and the verdict's own
		}
		expfmt.MetricFamilyToText(&text, f)
	}
	out["metrics"] = text.String()
	return out
}

func sortedPorts(p []uint16) []uint16 {
	p = slices.Clone(p)
	slices.Sort(p)
	return p
}

func parseConfig(t *testing.T, yaml string) config.Config {
	t.Helper()
	cfg, err := configfile.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A reload that changes every live key, refused at each of its steps in
// turn (prepare and commit, and inside the shaper switch after the old
// backend is closed): afterwards the data path's tables and settings, the
// shaper's classes and capacities, the registry and persisted names, the
// policy, configuration, allocators, metadata client, status and metrics
// equal what they were before; the verdict
// names the step and says everything was undone. The same reload applied
// whole changes every one of them, so the comparison can see a change.
func TestReloadIsATransaction(t *testing.T) {
	// With the shaper switched, the later steps act on the new backend and
	// its undo builds the old one again; with the same shaper, each step's
	// own undo must restore the backend it changed.
	variants := map[string]string{"shaper switched": txNext, "same shaper": strings.Replace(txNext, "mode: shadow\n", "", 1)}
	for _, variant := range slices.Sorted(maps.Keys(variants)) {
		t.Run(variant, func(t *testing.T) {
			next := parseConfig(t, variants[variant])
			whole := newTxRig(t)
			before := whole.state(t)
			if err := whole.a.Reload(next); err != nil {
				t.Fatalf("the whole reload: %v", err)
			}
			want := ReloadStepNames
			if variant == "same shaper" {
				want = slices.DeleteFunc(slices.Clone(want), func(s string) bool { return strings.HasPrefix(s, stepShaper) })
			}
			if !slices.Equal(whole.visited, want) {
				t.Fatalf("steps run %q, want %q", whole.visited, want)
			}
			after := whole.state(t)
			for k := range before {
				if before[k] == after[k] && k != "learner policy is the agent's" {
					t.Errorf("the reload applied whole left %q unchanged (%s): the comparison cannot see it change", k, before[k])
				}
			}
			for _, step := range whole.visited {
				t.Run(step, func(t *testing.T) { refusedAt(t, step, next) })
			}
		})
	}
}

// refusedAt fails a reload to next at step and compares everything before
// and after.
func refusedAt(t *testing.T, step string, next config.Config) {
	tr := newTxRig(t)
	before := tr.state(t)
	tr.fail = step
	err := tr.a.Reload(next)
	if err == nil {
		t.Fatal("the reload was applied despite the fault")
	}
	if !strings.Contains(err.Error(), step+": injected fault") {
		t.Errorf("the verdict does not name the step: %v", err)
	}
	if !strings.Contains(err.Error(), "nothing changed") && !strings.Contains(err.Error(), "every change was undone") {
		t.Errorf("the verdict does not say the state is as before: %v", err)
	}
	if errors.Is(err, ErrUndoFailed) {
		t.Errorf("the verdict says the undo failed: %v", err)
	}
	after := tr.state(t)
	for _, k := range slices.Sorted(maps.Keys(before)) {
		if before[k] != after[k] {
			t.Errorf("%s changed:\nbefore %s\nafter  %s", k, before[k], after[k])
		}
	}
	// The agent goes on: the next reload applies whole.
	tr.fail = ""
	if err := tr.a.Reload(next); err != nil {
		t.Errorf("the next reload: %v", err)
	}
}

// An undo that fails is said: the previous shaper cannot be built again,
// so nothing holds traffic back, and status says shadow (what the data path
// does), not the file's enforce.
func TestReloadSaysWhenTheUndoFailed(t *testing.T) {
	tr := newTxRig(t)
	tr.fail = stepSwap
	tr.failShaper = errors.New("no IFB")
	err := tr.a.Reload(parseConfig(t, txNext))
	if err == nil || !strings.Contains(err.Error(), "undo failed, the running state differs from before") ||
		!strings.Contains(err.Error(), "rebuild the previous shaper: no IFB") {
		t.Fatalf("verdict %v", err)
	}
	if !errors.Is(err, ErrUndoFailed) {
		t.Errorf("the error %v is not ErrUndoFailed: the daemon's verdict would not say partly applied", err)
	}
	if got := tr.a.Config().Mode; got != config.ModeEnforce {
		t.Errorf("configuration in force %s, want the previous enforce", got)
	}
	if s := tr.a.Snapshot(); s.Mode != "shadow" || s.Shaper != "shadow" {
		t.Errorf("status mode %s shaper %s, want what the data path does: shadow", s.Mode, s.Shaper)
	}
}

// A failed undo is remembered by what the data path does, not by the
// configuration: after an undo could not rebuild the shaper (nothing held
// back while the file says enforce), sluice_mode_mismatch is 1; a reload of
// the same file that still cannot build it is refused and leaves the state
// exactly as it was (the shadow fallback, not a half-built shaper); one
// that can builds it again, and the mismatch clears. Before this, the same
// file compared equal to the configuration in force, the reload reported
// applied and the shaper stayed unbuilt, with no signal.
func TestReloadAfterAFailedUndoRebuildsTheShaper(t *testing.T) {
	tr := newTxRig(t)
	tr.fail = stepSwap
	tr.failShaper = errors.New("no IFB")
	if err := tr.a.Reload(parseConfig(t, txNext)); err == nil || !errors.Is(err, ErrUndoFailed) {
		t.Fatalf("verdict %v, want an undo that failed", err)
	}
	tr.fail = ""
	mismatch := func() string {
		t.Helper()
		families, err := tr.metrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != "sluice_mode_mismatch" {
				continue
			}
			var text bytes.Buffer
			expfmt.MetricFamilyToText(&text, f)
			for _, line := range strings.Split(text.String(), "\n") {
				if strings.HasPrefix(line, "sluice_mode_mismatch{") {
					return line
				}
			}
		}
		t.Fatal("no sluice_mode_mismatch in the scrape")
		return ""
	}
	if got, want := mismatch(), `sluice_mode_mismatch{configured="enforce",running="shadow"} 1`; got != want {
		t.Errorf("after the failed undo: %s, want %s", got, want)
	}

	// The same file, the shaper still unbuildable: refused, nothing moved.
	same := parseConfig(t, txBefore)
	before := tr.state(t)
	err := tr.a.Reload(same)
	if err == nil || !strings.Contains(err.Error(), "no IFB") || !strings.Contains(err.Error(), "every change was undone") {
		t.Fatalf("reload of the same file while the shaper cannot be built: %v", err)
	}
	after := tr.state(t)
	for _, k := range slices.Sorted(maps.Keys(before)) {
		if before[k] != after[k] {
			t.Errorf("%s changed:\nbefore %s\nafter  %s", k, before[k], after[k])
		}
	}

	// The same file once the shaper can be built: applied, enforcing again.
	tr.failShaper = nil
	if err := tr.a.Reload(same); err != nil {
		t.Fatalf("reload of the same file: %v", err)
	}
	if s := tr.a.Snapshot(); s.Mode != "enforce" || s.Shaper != "htb" {
		t.Errorf("status mode %s shaper %s after the reload, want enforce htb", s.Mode, s.Shaper)
	}
	if tr.dp.settings.Shaper == sluicemaps.ShaperNone {
		t.Error("the data path still holds nothing back")
	}
	if got, want := mismatch(), `sluice_mode_mismatch{configured="enforce",running="enforce"} 0`; got != want {
		t.Errorf("after the rebuild: %s, want %s", got, want)
	}
}

// injectWrites makes w count (and fail) every write from now on: to the
// data path, the shaper in use, the shapers the factory builds, and the
// metadata and metrics factories.
func (tr *txRig) injectWrites(w *writeFaults) {
	tr.rig.faults = w
	tr.store.faults = w
	if sh, ok := tr.a.rates.Shaper().(*fakeShaper); ok {
		sh.faults = w
	}
}

// A reload refused part-way through any one write it makes (the k-th of
// the whole reload's writes, for every k, each failing after half its
// parts) ends either refused with everything as before, or applied: a
// write whose failure the agent tolerates (retried next cycle) leaves,
// after that cycle, what the reload applied whole leaves. Faults between
// steps (TestReloadIsATransaction) cannot show an undo that misses what a
// step did before it failed; these can.
func TestReloadFailingPartwayThroughAnyWrite(t *testing.T) {
	variants := map[string]string{"shaper switched": txNext, "same shaper": strings.Replace(txNext, "mode: shadow\n", "", 1)}
	for _, variant := range slices.Sorted(maps.Keys(variants)) {
		t.Run(variant, func(t *testing.T) {
			next := parseConfig(t, variants[variant])
			whole := newTxRig(t)
			count := &writeFaults{}
			whole.injectWrites(count)
			if err := whole.a.Reload(next); err != nil {
				t.Fatalf("the whole reload: %v", err)
			}
			whole.injectWrites(nil)
			whole.cycle()
			applied := whole.state(t)
			if count.n < 5 {
				t.Fatalf("the whole reload made %d writes (%q): the fakes do not see them", count.n, count.calls)
			}
			for k := 1; k <= count.n; k++ {
				t.Run(fmt.Sprintf("%02d-%s", k, count.calls[k-1]), func(t *testing.T) {
					tr := newTxRig(t)
					before := tr.state(t)
					tr.injectWrites(&writeFaults{failAt: k})
					err := tr.a.Reload(next)
					tr.injectWrites(nil)
					want := before
					if err == nil {
						tr.cycle() // what was tolerated is written again
						want = applied
					} else if !strings.Contains(err.Error(), "every change was undone") && !strings.Contains(err.Error(), "nothing changed") {
						t.Fatalf("the verdict does not say the state is as before: %v", err)
					}
					after := tr.state(t)
					for _, key := range slices.Sorted(maps.Keys(want)) {
						if want[key] != after[key] {
							t.Errorf("refused=%v: %s differs:\nwant %s\ngot  %s", err != nil, key, want[key], after[key])
						}
					}
				})
			}
		})
	}
}
