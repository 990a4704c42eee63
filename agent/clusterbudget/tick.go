package clusterbudget

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/cluster"
)

// Tick reads the coordination topic and runs the core: a share lowered by
// a new round is written at once through lower (only down), and then the
// acknowledgement or periodic report is sent. It says whether a share
// rose, so that the caller can run a control cycle at once.
func (cb *Budgets) Tick(now time.Duration, lower func(i int, share float64) error) (raised bool) {
	before := cb.scratch[:0]
	if cb.Enforcing() {
		before = append(before, cb.core.Applied()...)
	}
	cb.scratch = before
	cb.tick(now, lower)
	for i, v := range before {
		raised = raised || cb.core.Applied()[i] > v
	}
	// Once when the state file starts failing, then every 60 failures
	// (not every tick while the count stands still).
	if cb.persistFailures != cb.loggedFailures && cb.persistFailures%60 == 1 && cb.log != nil {
		cb.log.Error("cluster report withheld: its promises could not be kept on disk; after the lease this host takes its fallback share",
			"failures", cb.persistFailures, "err", cb.lastErr)
	}
	cb.loggedFailures = cb.persistFailures
	return raised
}

// ignoredLogEvery: a kind of ignored report is logged when first seen, then
// at most once in this long, with how many came since.
const ignoredLogEvery = time.Minute

// logIgnored says that a report was ignored and why: at warning level for
// what no healthy cluster writes (another cluster or configuration, an
// unknown broker, two agents on one broker id, a previous life, a bad
// field, a round far ahead), at debug level for redeliveries and
// reordering (the network's doing). Each kind once a minute at most.
func (cb *Budgets) logIgnored(now time.Duration, verdict cluster.Verdict, r *cluster.Report) {
	if verdict == cluster.Accepted || cb.log == nil {
		return
	}
	at, seen := cb.ignoredLogged[verdict]
	if seen && now-at < ignoredLogEvery {
		return
	}
	since := cb.verdicts[verdict] - cb.ignoredCount[verdict]
	cb.ignoredLogged[verdict], cb.ignoredCount[verdict] = now, cb.verdicts[verdict]
	level := slog.LevelWarn
	if verdict == cluster.Duplicate || verdict == cluster.Stale {
		level = slog.LevelDebug
	}
	msg := "cluster report ignored, counted in sluice_cluster_reports_received_total"
	if verdict == cluster.Outside {
		// Another configuration's member (a roll of brokers: or of the
		// timing parameters): not split, but its allowance is reserved.
		msg = "cluster report from a broker outside this configuration, counted outside the budget in sluice_cluster_reports_received_total"
	}
	cb.log.Log(context.Background(), level, msg, "verdict", verdict.String(),
		"cluster", r.Cluster, "broker", r.Broker, "epoch", r.Epoch, "instance", r.Instance, "seq", r.Seq, "round", r.Round, "since_last_log", since)
}

// tick reads the topic, runs the core, writes lowered shares, then persists
// and sends the report the core asks for. A report is withheld if a lowered
// share could not be written: it would claim a share the data path does
// not hold.
func (cb *Budgets) tick(now time.Duration, lower func(i int, share float64) error) {
	at, ok := cb.link.Log.Drain(func(r *cluster.Report) {
		verdict := cb.core.Observe(r)
		cb.verdicts[verdict]++
		cb.logIgnored(now, verdict, r)
	})
	if ok {
		cb.core.CaughtUp(at)
	}
	if cb.link.Leaders != nil {
		for i, b := range cb.budgets {
			if n, known := cb.link.Leaders.Led(cb.cfg.BrokerID, b.Topics); known {
				cb.locals[i].Led = n
			}
		}
	}
	r := cb.core.Step(now, cb.locals)
	cb.followHolders(now)
	written := true
	if cb.Enforcing() {
		for i, share := range cb.core.Applied() {
			if err := lower(i, share); err != nil {
				written = false
				cb.lastErr = err
			}
		}
	}
	if r == nil {
		return
	}
	if !written {
		cb.withheld++
		return
	}
	disk := cb.core.Persist()
	if cb.mustPersist(disk) {
		if err := cb.state.write(clusterStateFile{Disk: disk, Applied: cb.core.Applied()}); err != nil {
			cb.persistFailures++
			cb.withheld++
			cb.lastErr = fmt.Errorf("cluster state file: %w", err)
			return
		}
		cb.lastDisk, cb.diskWritten, cb.lastMode = disk, true, cb.core.Mode()
	}
	cb.link.Log.Publish(r)
	cb.published++
	if cb.log != nil && !r.Ack && cb.log.Enabled(context.Background(), slog.LevelDebug) {
		for i, e := range r.Entities {
			cb.log.Debug("cluster report", "budget", e.Entity, "round", r.Round, "processed", r.Processed, "usage", int64(e.Usage),
				"held_back", e.HeldBack, "applied", e.Applied, "led", e.Led, "mode", cb.core.Mode().String(), "target", cb.targetOf(i))
		}
	}
}

// mustPersist says whether the state file must be rewritten before the
// next report: when it holds nothing yet, when the mode changed, or when
// anything the report may depend on changed (epoch, boot, highest round
// promised, whether the lease is anchored). An anchor that only moved
// forward, by less than anchorSlack since the file's, is not worth a
// rewrite and its two fsyncs: every report echo moves it, and a restart
// that reads an older anchor only counts its lease as shorter (it falls
// back sooner, never later). When a report is sent, the file's anchor is
// less than anchorSlack behind the agent's.
func (cb *Budgets) mustPersist(disk cluster.Disk) bool {
	if !cb.diskWritten || cb.core.Mode() != cb.lastMode {
		return true
	}
	onFile := cb.lastDisk
	if disk.Anchored && onFile.Anchored && disk.Anchor > onFile.Anchor && disk.Anchor-onFile.Anchor < cb.anchorSlack {
		onFile.Anchor = disk.Anchor
	}
	return disk != onFile
}

// followHolders records since when each budget's raise has been held up by
// other brokers.
func (cb *Budgets) followHolders(now time.Duration) {
	cb.lastTick = now
	for i := range cb.budgets {
		holders := cb.core.HoldingRaise(i)
		for b := range cb.heldSince[i] {
			if !slices.Contains(holders, b) {
				delete(cb.heldSince[i], b)
			}
		}
		for _, b := range holders {
			if _, ok := cb.heldSince[i][b]; !ok {
				cb.heldSince[i][b] = now
			}
		}
	}
}

// raiseHolders are the brokers holding budget i's raise up, each with how
// long it has without a break, the longest first.
func (cb *Budgets) raiseHolders(i int) []status.ClusterRaiseHolder {
	if i >= len(cb.heldSince) {
		return nil
	}
	var out []status.ClusterRaiseHolder
	for b, since := range cb.heldSince[i] {
		out = append(out, status.ClusterRaiseHolder{Broker: int32(b), Seconds: (cb.lastTick - since).Seconds()})
	}
	slices.SortFunc(out, func(x, y status.ClusterRaiseHolder) int {
		if x.Seconds != y.Seconds {
			return cmp.Compare(y.Seconds, x.Seconds)
		}
		return cmp.Compare(x.Broker, y.Broker)
	})
	return out
}
