package clusterbudget

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/cluster"
)

// echoLog is a one-broker coordination topic: what is published is read
// back at the next drain, unless deaf (nothing lands: the lease anchor
// stands still). Each report is checked against the state file at the
// moment it is sent.
type echoLog struct {
	t       *testing.T
	path    string
	now     *time.Duration
	deaf    bool
	reports []cluster.Report
	sent    int
	// rewrites counts the reports sent after the file was replaced since
	// the previous report.
	rewrites int
	last     os.FileInfo
}

func (l *echoLog) Publish(r *cluster.Report) {
	l.t.Helper()
	st, err := readClusterState(l.path)
	if err != nil || st == nil {
		l.t.Fatalf("report %d sent with no state file: %v", r.Seq, err)
	}
	// What the report promises must be on disk before it is sent.
	if st.Disk.Epoch != r.Epoch || st.Disk.ProcessedSent < r.Processed {
		l.t.Fatalf("report epoch %d processed %d sent; the file holds epoch %d processed %d", r.Epoch, r.Processed, st.Disk.Epoch, st.Disk.ProcessedSent)
	}
	info, err := os.Stat(l.path)
	if err != nil {
		l.t.Fatal(err)
	}
	if l.last == nil || !os.SameFile(info, l.last) {
		l.rewrites++
	}
	l.last = info
	l.sent++
	c := *r
	c.Entities = slices.Clone(r.Entities)
	l.reports = append(l.reports, c)
}

func (l *echoLog) Drain(fn func(r *cluster.Report)) (time.Duration, bool) {
	if !l.deaf {
		for i := range l.reports {
			fn(&l.reports[i])
		}
	}
	l.reports = l.reports[:0]
	return *l.now, !l.deaf
}

func (l *echoLog) Stats() LogStats { return LogStats{CaughtUp: true} }
func (l *echoLog) Close()          {}

// A report rewrites the state file only when what it depends on changed:
// every report finds its epoch and highest processed round on disk, a
// lease anchor that only moved on is written at most once a refresh
// interval, an unchanged state is not rewritten at all, and what was
// written is what a restart reads.
func TestStateFileWrittenWhenPromisesChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.state")
	rate, resv := 300.0, 60.0
	cfg := config.Default()
	cfg.Cluster = config.Cluster{Enabled: true, Name: "c", BrokerID: 1, Brokers: []int32{1}, Mode: config.ModeEnforce,
		Lease: 3 * time.Second, MaxDelivery: time.Second, Fallback: config.FallbackEvenSplit, StateFile: path,
		Entities: config.ClusterEntities{Clients: map[string]config.ClusterQuota{"backfill": {ConsumerByteRate: &rate, ConsumerByteReservation: &resv}}}}
	var now time.Duration
	log := &echoLog{t: t, path: path, now: &now}
	cb, err := New(cfg, Link{Log: log}, now, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	const tick = 100 * time.Millisecond
	run := func(d time.Duration) {
		for end := now + d; now < end; {
			now += tick
			cb.Measure(0, 100, 100, false)
			cb.Tick(now, func(int, float64) error { return nil })
		}
	}
	run(10 * time.Second)
	if cb.core.Processed() == 0 || cb.core.Mode() != cluster.ModeNormal {
		t.Fatalf("no round processed (%d) or not normal (%v): the test does not exercise what it names", cb.core.Processed(), cb.core.Mode())
	}
	// Each round is a periodic report and its acknowledgement: the
	// acknowledgement's new processed round is written, the periodic
	// report's newer anchor alone is not.
	t.Logf("%d reports, the file replaced before %d", log.sent, log.rewrites)
	if log.rewrites*2 > log.sent+2 {
		t.Errorf("state file replaced before %d of %d reports; want about every second one (each round's promise)", log.rewrites, log.sent)
	}
	st, err := readClusterState(path)
	if err != nil {
		t.Fatal(err)
	}
	if disk := cb.core.Persist(); disk.Anchor-st.Disk.Anchor >= cfg.RefreshInterval || disk.ProcessedSent != st.Disk.ProcessedSent {
		t.Errorf("file holds anchor %v processed %d; the core %v %d: the anchor may lag less than %v, the promise not at all",
			st.Disk.Anchor, st.Disk.ProcessedSent, disk.Anchor, disk.ProcessedSent, cfg.RefreshInterval)
	}

	// Deaf, within the lease (3 s from the last anchor, under a second
	// old): no report lands, no round closes, nothing on disk changes; the
	// periodic reports go out without replacing the file.
	log.deaf = true
	before, rewrites, sent := st.Disk, log.rewrites, log.sent
	run(1500 * time.Millisecond)
	if log.sent == sent || log.rewrites != rewrites || cb.core.Mode() != cluster.ModeNormal {
		t.Errorf("unchanged state: %d reports sent, file replaced %d times, mode %v; want reports, no rewrite, normal", log.sent-sent, log.rewrites-rewrites, cb.core.Mode())
	}
	// Past the lease it falls back: a change of mode is written.
	run(2 * time.Second)
	if cb.core.Mode() != cluster.ModeFallback || log.rewrites == rewrites {
		t.Errorf("mode %v, file replaced %d times after the lease; want fallback written", cb.core.Mode(), log.rewrites-rewrites)
	}

	// A restart reads what the file holds: the next life outranks this
	// one and never raises for a round older than the promise.
	st, err = readClusterState(path)
	if err != nil || st.Disk.ProcessedSent < before.ProcessedSent || st.Disk.Epoch != before.Epoch {
		t.Fatalf("read back %+v, %v; want epoch %d, processed ≥ %d", st, err, before.Epoch, before.ProcessedSent)
	}
	next, err := New(cfg, Link{Log: &echoLog{t: t, path: path, now: &now}}, now, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := next.core.Persist(); d.ProcessedSent != st.Disk.ProcessedSent || d.Anchor != st.Disk.Anchor {
		t.Errorf("restarted with %+v; the file holds %+v", d, st.Disk)
	}
}
