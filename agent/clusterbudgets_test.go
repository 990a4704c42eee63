package agent

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/cluster"
	"github.com/sluice-dev/sluice/maps"
)

// fakeTopic is the coordination topic in memory: one ordered log every
// fakeLog appends to and reads from.
type fakeTopic struct{ reports []cluster.Report }

type fakeLog struct {
	topic *fakeTopic
	next  int
	clock *fakeClock
	// cut: the host cannot reach Kafka (nothing sent or read).
	cut       bool
	published uint64
	lateAcks  uint64 // reports the transport says landed after max_delivery
}

func (l *fakeLog) Publish(r *cluster.Report) {
	if l.cut {
		return
	}
	c := *r
	c.Entities = slices.Clone(r.Entities)
	l.topic.reports = append(l.topic.reports, c)
	l.published++
}

func (l *fakeLog) Drain(fn func(r *cluster.Report)) (time.Duration, bool) {
	if l.cut {
		return 0, false
	}
	for ; l.next < len(l.topic.reports); l.next++ {
		r := l.topic.reports[l.next]
		r.Entities = slices.Clone(r.Entities)
		fn(&r)
	}
	return l.clock.Monotonic(), true
}

func (l *fakeLog) Stats() ClusterLogStats {
	return ClusterLogStats{Published: l.published, Delivered: uint64(l.next), CaughtUp: !l.cut, LateAcks: l.lateAcks}
}
func (l *fakeLog) Close() {}

// fakeLeaders: partitions of the budgets' topics led per broker.
type fakeLeaders map[int32]uint32

func (f fakeLeaders) Led(broker int32, _ []string) (uint32, bool) { return f[broker], true }

const clusterTestLimit = 300.0

func clusterConfig(broker int32, stateFile, extra, rate string) string {
	return baseConfig + fmt.Sprintf(`
cluster:
  name: test
  broker_id: %d
  brokers: [1, 2, 3]
  lease: 3s
  max_delivery: 1s
  state_file: %s
%s  entities:
    clients:
      backfill: {consumer_byte_rate: %s, consumer_byte_reservation: 60, topics: [history]}
`, broker, stateFile, extra, rate)
}

// clusterRig is three broker hosts' agents sharing one topic, each with a
// client "backfill" asking for demand[b] bytes/s.
type clusterRig struct {
	t      *testing.T
	topic  *fakeTopic
	rigs   []*rig
	logs   []*fakeLog
	dirs   []string
	demand []float64
	extra  string
	// rate is the budget's consumer_byte_rate ("kafka": read from quotas[b],
	// each host's own view of Kafka's quota store).
	rate   string
	quotas [3]*fakeQuotas
	// raises[b]: ticks of host b that raised a share (the daemon runs a
	// control cycle at once after each).
	raises [3]int
	// frozen[b]: host b's agent is stuck: its clock runs, it neither cycles
	// nor reads the topic nor reports.
	frozen [3]bool
}

func newClusterRig(t *testing.T, extra string) *clusterRig {
	return newClusterRigRate(t, extra, fmt.Sprint(clusterTestLimit))
}

func newClusterRigRate(t *testing.T, extra, rate string) *clusterRig {
	c := &clusterRig{t: t, topic: &fakeTopic{}, demand: []float64{1000, 1000, 1000}, extra: extra, rate: rate}
	for b := range c.quotas {
		c.quotas[b] = &fakeQuotas{}
	}
	for b := range 3 {
		c.dirs = append(c.dirs, t.TempDir())
		c.rigs = append(c.rigs, nil)
		c.logs = append(c.logs, nil)
		c.start(b)
	}
	return c
}

// start (re)starts host b's agent with its state file.
func (c *clusterRig) start(b int) {
	leaders := fakeLeaders{1: 16, 2: 3, 3: 1}
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	if old := c.rigs[b]; old != nil {
		clock = old.clock
	}
	log := &fakeLog{topic: c.topic, clock: clock}
	c.logs[b] = log
	file := clusterConfig(int32(b+1), filepath.Join(c.dirs[b], "cluster.state"), c.extra, c.rate)
	if c.rate == config.ClusterLimitFromKafka {
		file += "kafka_quotas: import\nbootstrap: [127.0.0.1:9092]\n"
	}
	c.rigs[b] = newRigWith(c.t, file, func(d *Deps) {
		d.NewMetadata = func(cfg config.Config) (Metadata, error) {
			if cfg.KafkaQuotas == config.KafkaQuotasImport {
				return Metadata{Quotas: c.quotas[b]}, nil
			}
			return Metadata{}, nil
		}
		d.Clock = clock
		d.NewCluster = func(config.Config) (ClusterLink, error) {
			return ClusterLink{Log: log, Leaders: leaders}, nil
		}
	})
	c.rigs[b].clock = clock // the rig advances the clock the agent reads
}

// second runs one second of three hosts: each reads the topic every
// ClusterTickInterval and runs its control cycle once, at its own phase;
// at the cycle its client has sent what its demand and its limit allowed
// over the second, and is held back when it wants more. check runs after
// every step of any host.
func (c *clusterRig) second(check func()) {
	c.t.Helper()
	ticks := int(time.Second / ClusterTickInterval)
	for k := range ticks {
		for b, r := range c.rigs {
			r.clock.advance(ClusterTickInterval)
			if c.frozen[b] {
				continue
			}
			if k == b*ticks/len(c.rigs) {
				id := c.backfillID(b)
				limit := r.sh.rates[maps.Fetch][id]
				sent := min(c.demand[b], limit)
				r.sh.throttled[maps.Fetch][id] = c.demand[b] > limit
				r.dp.add(maps.Fetch, id, uint64(sent))
				if err := r.a.Cycle(); err != nil {
					c.t.Fatal(err)
				}
				check()
			}
			if r.a.ClusterTick() {
				c.raises[b]++
			}
			check()
		}
	}
}

func (c *clusterRig) backfillID(b int) uint32 {
	id, ok := c.rigs[b].a.registry.Lookup(entity.Key{Kind: entity.KindClient, Name: "backfill"})
	if !ok {
		c.t.Fatal("backfill is not registered")
	}
	return uint32(id)
}

// enforced is what host b's shaper holds backfill to.
func (c *clusterRig) enforced(b int) float64 { return c.rigs[b].sh.rates[maps.Fetch][c.backfillID(b)] }

func (c *clusterRig) view(b int) *status.ClusterView { return c.rigs[b].a.Snapshot().Cluster }

// sumEnforced checks the conservation invariant from the shapers.
func (c *clusterRig) sumEnforced() float64 {
	var sum float64
	for b := range c.rigs {
		sum += c.enforced(b)
	}
	return sum
}

// The worked example of docs/cluster-budgets.md §2 through three agents:
// limit 300, reservation 60, partitions led 16/3/1, every host held back.
// Their shapers end at 240/45/15, and Σ of what the shapers enforce never
// exceeds the limit on the way, nor when broker 1's client goes quiet and
// the others take its share.
func TestClusterBudgetsSplitByLeadershipAndConserve(t *testing.T) {
	c := newClusterRig(t, "")
	want := []float64{240, 45, 15}
	converged := -1
	for k := range 30 {
		c.second(func() {
			if sum := c.sumEnforced(); sum > clusterTestLimit {
				t.Fatalf("second %d: the shapers hold backfill to %v, Σ %v > the cluster limit %v", k, []float64{c.enforced(0), c.enforced(1), c.enforced(2)}, sum, clusterTestLimit)
			}
		})
		at := true
		for b := range 3 {
			at = at && math.Abs(c.enforced(b)-want[b]) <= 1
		}
		if at && converged < 0 {
			converged = k
		}
	}
	if converged < 0 {
		t.Fatalf("shapers hold %v, want %v", []float64{c.enforced(0), c.enforced(1), c.enforced(2)}, want)
	}
	t.Logf("shapers reached %v in %d s", want, converged+1)
	for b := range 3 {
		v := c.view(b)
		if v.Lease != "normal" || v.Rebuilding || v.Epoch == 0 {
			t.Fatalf("host %d: lease %s, rebuilding %v, epoch %d", b+1, v.Lease, v.Rebuilding, v.Epoch)
		}
		bv := v.Budgets[0]
		if bv.ID != "client:fetch:backfill" || float64(bv.Share) != c.enforced(b) || len(bv.Brokers) != 3 || bv.Led != []uint32{16, 3, 1}[b] {
			t.Fatalf("host %d status: %+v (shaper %v)", b+1, bv, c.enforced(b))
		}
		if e := entityView(c.rigs[b].a.Snapshot(), entity.Fetch, "backfill"); e.Sources.Limit != "cluster share" || float64(e.Limit) != c.enforced(b) {
			t.Fatalf("host %d explains its limit as %v from %q", b+1, e.Limit, e.Sources.Limit)
		}
		if v.Reports["accepted"] == 0 || v.Reports["malformed"]+v.Reports["conflict"]+v.Reports["fenced"] != 0 {
			t.Fatalf("host %d verdicts: %v", b+1, v.Reports)
		}
	}

	// Broker 1's client drops to 10 bytes/s: the other two take the rest,
	// lowered before raised.
	c.demand[0] = 10
	shifted := -1
	for k := range 20 {
		c.second(func() {
			if sum := c.sumEnforced(); sum > clusterTestLimit {
				t.Fatalf("%d s after the shift: Σ %v > %v (%v)", k, sum, clusterTestLimit, []float64{c.enforced(0), c.enforced(1), c.enforced(2)})
			}
		})
		if shifted < 0 && c.enforced(1)+c.enforced(2) >= 0.9*(clusterTestLimit-48) {
			shifted = k
		}
	}
	t.Logf("brokers 2 and 3 held to %v and %v, 90 %% of the rest reached in %d s", c.enforced(1), c.enforced(2), shifted+1)
	if c.raises[1] == 0 || c.raises[2] == 0 {
		t.Fatalf("no tick of brokers 2 and 3 reported a raise (%v): the daemon would not run the cycle that applies it", c.raises)
	}
	if shifted < 0 || shifted+1 > 3 {
		t.Fatalf("brokers 2 and 3 took %d s to reach 90 %% of the share broker 1 gave up; want at most 3", shifted+1)
	}
	if c.enforced(1)+c.enforced(2) < 0.8*clusterTestLimit {
		t.Fatalf("brokers 2 and 3 hold %v and %v after broker 1's client went quiet; want most of %v", c.enforced(1), c.enforced(2), clusterTestLimit)
	}
}

// A host cut from the topic keeps its share for the lease, then takes the
// fallback share (even split: 100); the others reclaim its share only after
// K of their reports, and Σ stays within the limit plus the cut host's
// fallback share all along (docs/cluster-budgets.md §5). Reconnected, it
// returns to normal and Σ returns under the limit.
func TestClusterBudgetsLeaseFallbackAndReclaim(t *testing.T) {
	c := newClusterRig(t, "")
	for range 8 {
		c.second(func() {})
	}
	c.logs[2].cut = true
	bound := clusterTestLimit + math.Floor(clusterTestLimit/3)
	var fellBack, reclaimed int
	for k := range 30 {
		c.second(func() {
			if sum := c.sumEnforced(); sum > bound {
				t.Fatalf("%d s after the cut: Σ %v > limit + fallback share %v (%v)", k, sum, bound, []float64{c.enforced(0), c.enforced(1), c.enforced(2)})
			}
		})
		v := c.view(2)
		if fellBack == 0 && v.Lease == "fallback" {
			fellBack = k + 1
			if v.Budgets[0].Share != 100 || !strings.Contains(v.Budgets[0].Why, "fallback (even-split)") {
				t.Fatalf("fallen back to %v (%s), want the even split 100", v.Budgets[0].Share, v.Budgets[0].Why)
			}
		}
		if reclaimed == 0 && !c.view(0).Budgets[0].Brokers[2].Live {
			reclaimed = k + 1
		}
	}
	if fellBack == 0 || fellBack > 5 || reclaimed == 0 || reclaimed <= fellBack {
		t.Fatalf("fell back after %d s (lease 3 s), reclaimed by the others after %d s", fellBack, reclaimed)
	}
	t.Logf("fell back after %d s, reclaimed after %d s; shapers then %v", fellBack, reclaimed, []float64{c.enforced(0), c.enforced(1), c.enforced(2)})
	c.logs[2].cut = false
	for k := range 10 {
		c.second(func() {
			if sum := c.sumEnforced(); sum > bound {
				t.Fatalf("%d s after reconnecting: Σ %v > %v", k, sum, bound)
			}
		})
	}
	if v := c.view(2); v.Lease != "normal" || c.sumEnforced() > clusterTestLimit {
		t.Fatalf("reconnected: lease %s, Σ %v", v.Lease, c.sumEnforced())
	}
}

// A restarted agent takes the next epoch from its state file, starts from
// its fallback share (its data path was not adopted here), reads the topic
// before it acts, and its previous life's reports are never counted again:
// nobody sees a fenced report or a conflict, and Σ holds throughout.
func TestClusterBudgetsRestartKeepsEpochsApart(t *testing.T) {
	c := newClusterRig(t, "")
	for range 8 {
		c.second(func() {})
	}
	before := c.view(1).Epoch
	c.rigs[1].a.StopMetadata()
	c.start(1)
	// The next epoch: the state file's + 1, or the wall clock's
	// milliseconds when they are further on (cluster.Start.WallEpoch).
	if core := c.rigs[1].a.cluster.Core(); core.Epoch() <= before || !core.Rebuilding() {
		t.Fatalf("restarted: epoch %d (was %d), rebuilding %v", core.Epoch(), before, core.Rebuilding())
	}
	bound := clusterTestLimit + math.Floor(clusterTestLimit/3)
	for k := range 10 {
		c.second(func() {
			if sum := c.sumEnforced(); sum > bound {
				t.Fatalf("%d s after the restart: Σ %v > %v", k, sum, bound)
			}
		})
	}
	for b := range 3 {
		v := c.view(b)
		if v.Reports["conflict"] != 0 || v.Lease != "normal" {
			t.Fatalf("host %d after the restart: lease %s, verdicts %v", b+1, v.Lease, v.Reports)
		}
	}
	if c.sumEnforced() > clusterTestLimit || c.enforced(1) < 40 {
		t.Fatalf("after the restart the shapers hold %v", []float64{c.enforced(0), c.enforced(1), c.enforced(2)})
	}
}

// Shadow mode computes, reports and shows shares and applies none: the
// entity's limit stays what the host's own configuration gives it.
func TestClusterBudgetsShadowAppliesNothing(t *testing.T) {
	c := newClusterRig(t, "  mode: shadow\n")
	for range 8 {
		c.second(func() {})
	}
	for b := range 3 {
		v := c.view(b)
		bv := v.Budgets[0]
		e := entityView(c.rigs[b].a.Snapshot(), entity.Fetch, "backfill")
		if v.Mode != "shadow" || v.Published == 0 || float64(bv.Share) != []float64{240, 45, 15}[b] {
			t.Fatalf("host %d: mode %s, published %d, share %v", b+1, v.Mode, v.Published, bv.Share)
		}
		if e.Sources.Limit == "cluster share" || c.enforced(b) <= float64(bv.Share) && b == 0 {
			t.Fatalf("host %d applies the share in shadow mode: limit %v from %q, shaper %v", b+1, e.Limit, e.Sources.Limit, c.enforced(b))
		}
	}
}

// Reports a client or another cluster could put on the topic are counted
// by verdict and change no share.
func TestClusterBudgetsIgnoreBadReports(t *testing.T) {
	c := newClusterRig(t, "")
	for range 8 {
		c.second(func() {})
	}
	shares := []float64{c.enforced(0), c.enforced(1), c.enforced(2)}
	good := c.topic.reports[len(c.topic.reports)-1]
	bad := func(edit func(r *cluster.Report)) {
		r := good
		r.Entities = slices.Clone(good.Entities)
		edit(&r)
		c.topic.reports = append(c.topic.reports, r)
	}
	bad(func(r *cluster.Report) { r.Cluster = "other" })
	bad(func(r *cluster.Report) { r.Entities[0].Usage = math.NaN() })
	bad(func(r *cluster.Report) { r.Epoch = 0 })
	bad(func(r *cluster.Report) { r.Seq, r.Round = r.Seq+100, r.Round+1_000_000 })
	bad(func(r *cluster.Report) { r.Entities[0].Entity = "client:fetch:intruder" })
	for range 3 {
		c.second(func() {})
	}
	v := c.view(0)
	for verdict, want := range map[string]uint64{"foreign": 2, "malformed": 2, "round_jump": 1} {
		if v.Reports[verdict] != want {
			t.Errorf("%s: %d, want %d (%v)", verdict, v.Reports[verdict], want, v.Reports)
		}
	}
	if now := []float64{c.enforced(0), c.enforced(1), c.enforced(2)}; !slices.Equal(now, shares) {
		t.Fatalf("shares moved from %v to %v", shares, now)
	}
	// Each kind is logged once (two foreign reports: one line), naming it.
	logs := c.rigs[0].logs.String()
	for _, verdict := range []string{"foreign", "malformed", "round_jump"} {
		if n := strings.Count(logs, "cluster report ignored, counted in sluice_cluster_reports_received_total\" verdict="+verdict); n != 1 {
			t.Errorf("%d log lines for the %s reports, want 1:\n%s", n, verdict, logs)
		}
	}
	// A broker id the configuration does not list is another
	// configuration's member (issue #49): counted outside the budget, so
	// the others make room for it, never more.
	bad(func(r *cluster.Report) { r.Broker = 9 })
	for range 3 {
		c.second(func() {})
	}
	if n := c.view(0).Reports["outside"]; n != 1 {
		t.Errorf("outside: %d, want 1 (%v)", n, c.view(0).Reports)
	}
	for b, was := range shares {
		if now := c.enforced(b); now > was {
			t.Errorf("host %d raised from %v to %v when a broker outside the budget reported", b+1, was, now)
		}
	}
	if logs := c.rigs[0].logs.String(); !strings.Contains(logs, "verdict=outside cluster=test broker=9") {
		t.Errorf("the outside broker's line does not name it:\n%s", logs)
	}
}

// A state file that cannot be written withholds the reports (their promises
// would not survive a crash) and says so; the share in force stays.
func TestClusterBudgetsWithholdWithoutStateFile(t *testing.T) {
	c := newClusterRig(t, "")
	for range 8 {
		c.second(func() {})
	}
	published := c.view(0).Published
	dir := c.dirs[0]
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o700) })
	// Root ignores directory permissions: replace the file by a directory.
	state := filepath.Join(dir, "cluster.state")
	os.Chmod(dir, 0o700)
	os.Remove(state)
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	c.demand[0] = 10 // a new round, so there is something to persist
	for range 3 {
		c.second(func() {})
	}
	v := c.view(0)
	if v.StateFileFailures == 0 || v.Withheld == 0 || v.Published > published+1 {
		t.Fatalf("state file failing: failures %d, withheld %d, published %d (was %d)", v.StateFileFailures, v.Withheld, v.Published, published)
	}
	if !strings.Contains(c.rigs[0].logs.String(), "cluster report withheld") {
		t.Fatal("the failing state file is not logged")
	}
	// Once, not on every tick while the failure count stands still.
	if n := strings.Count(c.rigs[0].logs.String(), "cluster report withheld"); n != 1 || v.StateFileFailures >= 60 {
		t.Fatalf("logged %d times for %d failures", n, v.StateFileFailures)
	}
}

// The cluster families report what status reports: the share this host
// enforces (read against its shaper), its lease state, verdict counts.
func TestClusterBudgetsMetrics(t *testing.T) {
	c := newClusterRig(t, "")
	for range 8 {
		c.second(func() {})
	}
	c.logs[1].lateAcks = 3
	m := NewMetrics(c.rigs[1].a, c.rigs[1].dp, MetricsInfo{})
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	value := func(name string, labels map[string]string) (float64, bool) {
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
				if m.GetGauge() != nil {
					return m.GetGauge().GetValue(), true
				}
				return m.GetCounter().GetValue(), true
			}
		}
		return 0, false
	}
	budget := map[string]string{"direction": "fetch", "entity_type": "client", "entity": "backfill"}
	if v, ok := value("sluice_cluster_budget_share_bytes_per_second", budget); !ok || v != c.enforced(1) {
		t.Errorf("share %v (%v), the shaper holds %v", v, ok, c.enforced(1))
	}
	if v, ok := value("sluice_cluster_budget_limit_bytes_per_second", budget); !ok || v != clusterTestLimit {
		t.Errorf("limit %v (%v)", v, ok)
	}
	if v, _ := value("sluice_cluster_lease", map[string]string{"state": "normal"}); v != 1 {
		t.Errorf("lease normal = %v", v)
	}
	if v, _ := value("sluice_cluster_lease", map[string]string{"state": "fallback"}); v != 0 {
		t.Errorf("lease fallback = %v", v)
	}
	if v, _ := value("sluice_cluster_reports_received_total", map[string]string{"verdict": "accepted"}); v == 0 {
		t.Error("no report counted as accepted")
	}
	if v, ok := value("sluice_cluster_topic_late_deliveries_total", nil); !ok || v != 3 {
		t.Errorf("late deliveries %v (%v), the transport counted 3", v, ok)
	}
}

// A limit of "kafka" is Kafka's quota for the client, as each host's
// quota store read has it. A host that reads a lowered quota first lowers
// every host (rounds split the smallest limit reported); a raise waits
// until every host has read it. Σ enforced never exceeds the old limit
// while a change spreads, nor the new one once every host holds it.
func TestClusterBudgetsLimitFromKafka(t *testing.T) {
	c := newClusterRigRate(t, "", config.ClusterLimitFromKafka)
	set := func(b int, rate float64) { c.quotas[b].imported(consumerLimits(map[string]float64{"backfill": rate})) }
	for b := range 3 {
		set(b, 300)
	}
	run := func(seconds int, bound float64) {
		t.Helper()
		for k := range seconds {
			c.second(func() {
				if sum := c.sumEnforced(); sum > bound {
					t.Fatalf("second %d: Σ enforced %v > %v (%v)", k+1, sum, bound, []float64{c.enforced(0), c.enforced(1), c.enforced(2)})
				}
			})
		}
	}
	run(15, 300)
	if sum := c.sumEnforced(); sum < 290 {
		t.Fatalf("Σ enforced %v with Kafka's quota at 300 on every host", sum)
	}
	v := c.view(1).Budgets[0]
	if v.LimitFrom != "kafka quota store" || v.Limit != 300 || v.HostLimit != 300 || v.Brokers[0].Limit != 300 {
		t.Fatalf("status: %+v", v)
	}

	// Host 1 reads Kafka's quota lowered to 150; the others have not yet.
	set(0, 150)
	run(3, 300)
	run(5, 150)
	if sum := c.sumEnforced(); sum < 140 {
		t.Fatalf("Σ enforced %v after host 1 read 150", sum)
	}
	if v := c.view(2).Budgets[0]; v.Limit != 150 || v.HostLimit != 300 {
		t.Fatalf("host 3's status after host 1 read 150: limit %v, its own %v", v.Limit, v.HostLimit)
	}

	// Raised to 400: hosts 1 and 2 read it, host 3 still has 300.
	set(0, 400)
	set(1, 400)
	run(5, 300)
	if sum := c.sumEnforced(); sum < 290 {
		t.Fatalf("Σ enforced %v when the smallest limit reported is 300", sum)
	}
	set(2, 400)
	run(5, 400)
	if sum := c.sumEnforced(); sum < 390 {
		t.Fatalf("Σ enforced %v after every host read 400", sum)
	}

	// The quota deleted in Kafka on every host: no cluster limit.
	for b := range 3 {
		c.quotas[b].imported(consumerLimits(nil))
	}
	run(5, 3000)
	if v := c.view(0).Budgets[0]; !math.IsInf(float64(v.Limit), 1) {
		t.Fatalf("limit %v after the quota was deleted, want none", v.Limit)
	}
}

// A stuck agent holds the others' raises: status names it, with the time
// it has waited, in the budget's why and raise_held_by, and the metric
// labelled with its id grows until the stuck host is reclaimed; then the
// raise proceeds and the series is gone. A broker that only acknowledges
// each round a moment after it closes holds the raise for that moment, and
// its wait starts again each time.
func TestClusterBudgetsNameTheBrokerHoldingARaise(t *testing.T) {
	c := newClusterRig(t, "")
	for range 10 {
		c.second(func() {})
	}
	if v := c.view(1).Budgets[0]; len(v.RaiseHeldBy) != 0 {
		t.Fatalf("converged, yet host 2's raise is held by %v", v.RaiseHeldBy)
	}
	// Host 3's agent hangs; broker 1's client goes quiet, so host 2 may
	// take its share once every live broker reports the new round.
	c.frozen[2] = true
	c.demand[0] = 10
	longest, reclaimed := 0.0, false
	for range 20 {
		c.second(func() {})
		v := c.view(1).Budgets[0]
		three := slices.IndexFunc(v.RaiseHeldBy, func(h status.ClusterRaiseHolder) bool { return h.Broker == 3 })
		if three < 0 && longest > 0 {
			reclaimed = true // broker 3 is no longer live in the round
			break
		}
		if three < 0 || v.RaiseHeldBy[three].Seconds < longest || !strings.Contains(v.Why, "broker 3 (") {
			t.Fatalf("host 2's raise held by %v (%q): want broker 3 named, its wait growing from %v s", v.RaiseHeldBy, v.Why, longest)
		}
		for _, h := range v.RaiseHeldBy {
			if h.Broker != 3 && h.Seconds > 1 {
				t.Fatalf("broker %d, which acknowledges every round, named as holding the raise for %v s", h.Broker, h.Seconds)
			}
		}
		longest = v.RaiseHeldBy[three].Seconds
		m := NewMetrics(c.rigs[1].a, c.rigs[1].dp, MetricsInfo{})
		families, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, f := range families {
			if f.GetName() == "sluice_cluster_budget_raise_held_seconds" {
				for _, mm := range f.GetMetric() {
					for _, l := range mm.GetLabel() {
						found = found || l.GetName() == "held_by" && l.GetValue() == "3" && mm.GetGauge().GetValue() == longest
					}
				}
			}
		}
		if !found {
			t.Fatalf("no sluice_cluster_budget_raise_held_seconds{held_by=\"3\"} = %v in the scrape", longest)
		}
	}
	if longest < 2 || !reclaimed {
		t.Fatalf("host 2's raise waited %v s on broker 3, reclaimed %v; want seconds of waiting named, then broker 3 reclaimed", longest, reclaimed)
	}
	c.second(func() {})
	if v := c.view(1).Budgets[0]; float64(v.Share) < float64(v.Target) {
		t.Fatalf("broker 3 reclaimed, yet host 2 holds %v of its %v target (%q)", v.Share, v.Target, v.Why)
	}
	t.Logf("host 2's raise waited %.1f s on broker 3, then went ahead without it", longest)
}

// heldRaiseFamilies scrapes host 2 of three while host 3's agent is stuck
// and host 2 waits on it to raise: the families only then exported.
func heldRaiseFamilies(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	c := newClusterRig(t, "")
	for range 10 {
		c.second(func() {})
	}
	c.frozen[2] = true
	c.demand[0] = 10
	for range 3 {
		c.second(func() {})
	}
	return scrape(t, NewMetrics(c.rigs[1].a, c.rigs[1].dp, MetricsInfo{}))
}
