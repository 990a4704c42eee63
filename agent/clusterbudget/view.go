package clusterbudget

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/cluster"
)

// targetOf is this host's target for budget i in the round it acts on (0
// before one).
func (cb *Budgets) targetOf(i int) float64 {
	if t, ok := cb.core.Pending(); ok {
		return t.Share(cb.myIndex(), i).Target
	}
	return 0
}

// Stop ends the link to the topic and closes the state file (a tick after
// it would replace the file).
func (cb *Budgets) Stop() {
	if cb == nil {
		return
	}
	if cb.link.Stop != nil {
		cb.link.Stop()
	}
	cb.state.close()
}

// View is status' picture of the cluster budgets.
func (cb *Budgets) View() *status.ClusterView {
	if cb == nil {
		return nil
	}
	core := cb.core
	v := core.View()
	t := v.Targets()
	out := &status.ClusterView{
		Name: cb.cfg.Name, Broker: cb.cfg.BrokerID, Mode: string(cb.cfg.Mode), Lease: core.Mode().String(),
		Rebuilding: core.Rebuilding(), Epoch: core.Epoch(), Round: t.Round, Processed: core.Processed(),
		Published: cb.published, Withheld: cb.withheld, StateFileFailures: cb.persistFailures,
		Reports: map[string]uint64{},
	}
	for verdict := cluster.Accepted; verdict.String() != "invalid"; verdict++ {
		out.Reports[verdict.String()] = cb.verdicts[verdict]
	}
	ls := cb.link.Log.Stats()
	out.Topic = status.ClusterTopicView{Name: cb.cfg.Topic, Published: ls.Published, PublishFailed: ls.PublishFailed, Delivered: ls.Delivered,
		Undecodable: ls.Undecodable, TopicErrors: ls.TopicErrors, LateAcks: ls.LateAcks, Lag: ls.Lag, CaughtUp: ls.CaughtUp, LastError: ls.LastError}
	me := cb.myIndex()
	pending, hasPending := core.Pending()
	for i, b := range cb.budgets {
		round, own := core.RoundBudget(i), core.Budget(i)
		bv := status.ClusterBudgetView{ID: b.ID, Kind: b.Kind, Name: b.Name, Direction: directionName(b.Produce),
			Limit: status.Bps(round.Limit), Reservation: status.Bps(min(round.Reservation, round.Limit)),
			HostLimit: status.Bps(own.Limit), LimitFrom: "config", Share: status.Bps(core.Applied()[i]),
			Usage: cb.locals[i].Usage, HeldBack: cb.locals[i].HeldBack, Led: cb.locals[i].Led}
		if b.LimitFromKafka {
			bv.LimitFrom = "kafka quota store"
		}
		if hasPending {
			s := pending.Share(me, i)
			bv.Target, bv.Reserved = status.Bps(s.Target), status.Bps(s.Reserved)
		}
		bv.RaiseHeldBy = cb.raiseHolders(i)
		bv.Why = cb.why(i, hasPending, bv.RaiseHeldBy)
		for bi, id := range slices.Sorted(slices.Values(cb.cfg.Brokers)) {
			r, ok := v.Latest(bi)
			bb := status.ClusterBrokerView{Broker: id, Live: t.Round > 0 && bi < len(t.Live) && t.Live[bi]}
			if ok && i < len(r.Entities) {
				e := r.Entities[i]
				bb.Reported, bb.Usage, bb.HeldBack, bb.Applied, bb.Led = true, e.Usage, e.HeldBack, status.Bps(e.Applied), e.Led
				bb.Limit = status.Bps(e.Limit)
				bb.Processed = r.Processed
				bv.SumUsage += e.Usage
			}
			bv.Brokers = append(bv.Brokers, bb)
		}
		out.Budgets = append(out.Budgets, bv)
	}
	return out
}

// why says in a sentence why this host's share is what it is; holders are
// the brokers holding its raise up (raiseHolders, computed once per view).
func (cb *Budgets) why(i int, hasPending bool, holders []status.ClusterRaiseHolder) string {
	core := cb.core
	applied := core.Applied()[i]
	switch {
	case core.Mode() == cluster.ModeFenced:
		return "fenced: another agent reports this broker id; holding at most the floor share"
	case core.Mode() == cluster.ModeFallback:
		return fmt.Sprintf("fallback (%s): no report of this host landed for the lease (%v)", cb.cfg.Fallback, cb.cfg.Lease)
	case core.Rebuilding():
		return "rebuilding: reading the topic before acting on a round"
	case !hasPending:
		return "no round computed yet"
	}
	pending, _ := core.Pending()
	target := pending.Share(cb.myIndex(), i).Target
	if applied < target {
		if len(holders) > 0 {
			return fmt.Sprintf("raising to round %d's target once every live broker reports it lowered: waiting for %s",
				pending.Round, holderList(holders))
		}
		return fmt.Sprintf("raising to round %d's target once every live broker reports it lowered", pending.Round)
	}
	return fmt.Sprintf("round %d's target", pending.Round)
}

// holderList says "broker 3 (41.0 s), broker 1 (0.2 s)".
func holderList(hs []status.ClusterRaiseHolder) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = "broker " + strconv.FormatInt(int64(h.Broker), 10) + " (" + strconv.FormatFloat(h.Seconds, 'f', 1, 64) + " s)"
	}
	return strings.Join(parts, ", ")
}

func directionName(produce bool) string {
	if produce {
		return "produce"
	}
	return "fetch"
}
