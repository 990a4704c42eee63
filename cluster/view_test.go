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
	// It echoes the report before it, as an agent that reads does.
	return &Report{
		Cluster: "prod", Broker: b, Epoch: epoch, Instance: uint64(b)*100 + epoch, Seq: seq, Round: round, Processed: processed, Echo: max(seq, 1) - 1,
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
		{"unknown broker (another configuration's member)", report(7, 1, 1, 1, 0, 0), Outside},
		{"round far ahead in a counted life", report(1, 2, 6, 5000, 0, 0), RoundJump},
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
	sum := func() float64 {
		var s float64
		for i := range 3 {
			s += v.Targets().Share(i, 0).Target
		}
		return s
	}
	// Broker 3 has no report in this View: it may have reported just
	// before the log the View read begins, so it is counted outside (two
	// thirds of the limit for the two live brokers) until K reports of
	// another broker have landed. Whole bytes/s, floored: at most one
	// byte/s per broker is left over.
	if s := sum(); tg.Outside != 1 || s > 20*mb || s < 20*mb-2 {
		t.Errorf("Σ targets %v with %d outside, want two thirds of the limit with broker 3 outside", s, tg.Outside)
	}
	k := testConfig().ReclaimReports()
	for seq := uint64(3); seq < 3+k; seq++ {
		v.Ingest(report(1, 1, seq, seq, 0, 0))
	}
	if s := sum(); v.Targets().Outside != 0 || s > 30*mb || s < 30*mb-2 {
		t.Errorf("after K reports: Σ targets %v with %d outside, want the whole limit over the two live brokers", s, v.Targets().Outside)
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

// TestViewCountsOtherConfigurationsOutside: a report whose configuration
// digest differs, or whose broker id is not listed, is counted outside the
// budget: the live brokers split their part of the limit over the members
// reporting. A version-2 report carries no digest and is taken as ours.
func TestViewCountsOtherConfigurationsOutside(t *testing.T) {
	cfg := testConfig()
	other := cfg
	other.Lease *= 2
	if cfg.Digest() == other.Digest() || cfg.Digest() == 0 {
		t.Fatalf("digests %x and %x: a different lease must change it", cfg.Digest(), other.Digest())
	}
	v := newTestView(t)
	mine := func(r *Report) *Report { r.Digest, r.Members = cfg.Digest(), 3; return r }
	v.Ingest(mine(report(1, 1, 1, 1, 0, 0)))
	v.Ingest(mine(report(2, 1, 1, 1, 0, 0)))
	theirs := report(3, 1, 1, 1, 0, 0)
	theirs.Digest, theirs.Members = other.Digest(), 3
	if got := v.Ingest(theirs); got != Outside {
		t.Fatalf("another configuration's report: %v, want outside", got)
	}
	newcomer := report(4, 1, 1, 1, 0, 0)
	newcomer.Digest, newcomer.Members = 12345, 4
	if got := v.Ingest(newcomer); got != Outside {
		t.Fatalf("an unlisted broker's report: %v, want outside", got)
	}
	v.Ingest(mine(report(1, 1, 2, 2, 0, 0)))
	tg := v.Targets()
	if tg.LiveCount != 2 || tg.Outside != 2 || tg.Members != 4 || tg.Split[0].Limit != 15*mb {
		t.Fatalf("round %d: live %d, outside %d, members %d, split %+v; want 2 live splitting 2/4 of 30 MB/s", tg.Round, tg.LiveCount, tg.Outside, tg.Members, tg.Split[0])
	}
	old := report(3, 1, 2, 2, 0, 0)
	old.Version = 2 // no digest on the wire: assumed to share ours
	if got := v.Ingest(old); got != Accepted {
		t.Fatalf("a version-2 report of broker 3: %v, want accepted", got)
	}
}
