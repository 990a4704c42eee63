package cluster

import (
	"math"
	"strings"
	"testing"
	"time"
)

func testConfig() Config {
	cfg := DefaultConfig("prod", []BrokerID{1, 2, 3}, []Entity{{ID: "tenant", Limit: 30 * mb, Reservation: 6 * mb}})
	cfg.Lease = 4 * time.Second
	cfg.MaxDelivery = time.Second
	return cfg
}

// report is broker b's report (instance b·100 + epoch, leading 80/15/5).
func report(b BrokerID, epoch, seq, round, processed uint64, applied float64) *Report {
	var led uint32
	if b >= 1 && int(b) <= len(led801505) {
		led = led801505[b-1]
	}
	return &Report{
		Cluster: "prod", Broker: b, Epoch: epoch, Instance: uint64(b)*100 + epoch, Seq: seq, Round: round, Processed: processed,
		Entities: []EntityReport{{Entity: "tenant", Usage: 1 * mb, Applied: applied, Led: led, Limit: 30 * mb, Reservation: 6 * mb}},
	}
}

func newTestView(t *testing.T) *View {
	t.Helper()
	v, err := NewView(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestViewBadInputIgnoredAndCounted(t *testing.T) {
	v := newTestView(t)
	if got := v.Ingest(report(1, 2, 5, 1, 0, 10*mb)); got != Accepted {
		t.Fatalf("first report: %v", got)
	}
	foreignEntity := report(1, 2, 6, 1, 0, 0)
	foreignEntity.Entities[0].Entity = "someone-else"
	nan := report(1, 2, 6, 1, 0, 0)
	nan.Entities[0].Usage = math.NaN()
	otherInstance := report(1, 2, 6, 1, 0, 0)
	otherInstance.Instance++
	otherCluster := report(1, 2, 6, 1, 0, 0)
	otherCluster.Cluster = "staging"
	cases := []struct {
		name string
		r    *Report
		want Verdict
	}{
		{"older epoch (a previous life)", report(1, 1, 9, 1, 0, 0), Fenced},
		{"two agents claim one broker id", otherInstance, Conflict},
		{"redelivery", report(1, 2, 5, 1, 0, 0), Duplicate},
		{"reordered", report(1, 2, 4, 1, 0, 0), Stale},
		{"epoch 0", report(1, 0, 6, 1, 0, 0), Malformed},
		{"processed after round", report(1, 2, 6, 1, 2, 0), Malformed},
		{"non-finite usage", nan, Malformed},
		{"another cluster", otherCluster, Foreign},
		{"other entities", foreignEntity, Foreign},
		{"unknown broker", report(7, 1, 1, 1, 0, 0), UnknownBroker},
		{"round far ahead", report(2, 1, 1, 5000, 0, 0), RoundJump},
	}
	for _, c := range cases {
		if got := v.Ingest(c.r); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	r, _ := v.Latest(0)
	if r.Epoch != 2 || r.Seq != 5 || r.Entities[0].Applied != 10*mb {
		t.Errorf("a rejected report changed what counts: %+v", r)
	}
	if v.MaxRound() != 1 || v.Targets().Round != 1 {
		t.Errorf("a rejected report moved the round: %v", v)
	}
	counters := v.Counters()
	if counters.Ignored() != uint64(len(cases)) || counters[Accepted] != 1 {
		t.Errorf("counters %v, want %d ignored", counters, len(cases))
	}
}

func TestViewNewEpochFencesTheOld(t *testing.T) {
	v := newTestView(t)
	v.Ingest(report(1, 1, 1, 1, 0, 10*mb))
	if got := v.Ingest(report(1, 2, 1, 1, 0, 5*mb)); got != Accepted {
		t.Fatalf("restart's first report: %v", got)
	}
	// The previous life's last report lands late: it must not count.
	if got := v.Ingest(report(1, 1, 2, 1, 0, 20*mb)); got != Fenced {
		t.Fatalf("late report of the old epoch: %v", got)
	}
	if r, _ := v.Latest(0); r.Epoch != 2 || r.Entities[0].Applied != 5*mb {
		t.Errorf("broker counted as %+v, want epoch 2's report only", r)
	}
}

func TestViewRoundUsesReportsBeforeIt(t *testing.T) {
	v := newTestView(t)
	v.Ingest(report(1, 1, 1, 1, 0, 0))
	v.Ingest(report(2, 1, 1, 1, 0, 0))
	// Broker 3 misses round 1; the first report of round 2 closes it.
	v.Ingest(report(1, 1, 2, 2, 0, 0))
	tg := v.Targets()
	if tg.Round != 2 || !tg.Live[0] || !tg.Live[1] || tg.Live[2] || tg.LiveCount != 2 {
		t.Fatalf("round 2 targets %+v, want brokers 1 and 2 live", tg)
	}
	var sum float64
	for i := range 3 {
		sum += tg.Share(i, 0).Target
	}
	// Whole bytes/s, floored: at most one byte/s per broker is left over.
	if sum > 30*mb || sum < 30*mb-2 {
		t.Errorf("Σ targets %v, want the whole limit over the two live brokers", sum)
	}
}

func TestViewReclaimsSilentBrokerAfterKReports(t *testing.T) {
	v := newTestView(t)
	k := v.Config().ReclaimReports()
	v.Ingest(report(1, 1, 1, 1, 0, 0))
	v.Ingest(report(2, 1, 1, 1, 0, 0))
	// Broker 2 falls silent; broker 1's report of round r is its (r−1)-th
	// since, and closes round r−1.
	for r := uint64(2); r <= k+2; r++ {
		v.Ingest(report(1, 1, r, r, 0, 0))
		silentFor := r - 1 - 1 // broker 1's reports after broker 2's, before this one
		if live := v.Targets().Live[1]; live != (silentFor < k) {
			t.Fatalf("round %d: broker 2 live=%v after %d of broker 1's reports (K=%d)", r, live, silentFor, k)
		}
	}
}

func TestReclaimReportsCoversLeaseAndSkew(t *testing.T) {
	cfg := DefaultConfig("prod", []BrokerID{1}, []Entity{{ID: "e", Limit: 1}})
	k := cfg.ReclaimReports()
	p, s, d := cfg.Period.Seconds(), cfg.MaxClockSkew, cfg.MaxDelivery.Seconds()
	holder := (cfg.Lease + cfg.Period + cfg.MaxDowntime).Seconds() / (1 - s)
	if float64(k-1)*p/(1+s)-d < holder {
		t.Errorf("K=%d reclaims before the holder must have fallen back", k)
	}
	if float64(k-2)*p/(1+s)-d >= holder {
		t.Errorf("K=%d is larger than it needs to be", k)
	}
	if k != 48 {
		t.Errorf("K=%d with the defaults, docs/cluster-budgets.md says 48", k)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	cfg := testConfig()
	cfg.Brokers = []BrokerID{1, 1}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "brokers[1]") {
		t.Errorf("duplicate broker: %v", err)
	}
	cfg = testConfig()
	cfg.Lease = time.Millisecond
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "lease") {
		t.Errorf("short lease: %v", err)
	}
}
