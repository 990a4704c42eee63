package cluster

import (
	"math"

	"github.com/sluice-dev/sluice/allocator"
)

// BrokerInput is one live broker's latest report for one entity.
type BrokerInput struct {
	Usage    float64
	HeldBack bool
	Led      uint32
}

// Share is one broker's part of an entity's cluster budget.
type Share struct {
	// Reserved is the broker's part of the reservation: the entity's
	// reservation × the fraction of its partitions the broker leads. It is
	// spread before demand is seen, so a tenant's reservation is in place
	// where its partitions lead before its clients send a byte.
	Reserved float64
	// Target is Reserved plus the broker's water-filled part of the rest
	// of the limit: the share the broker may apply in this round.
	Target float64
}

// sharer computes Shares with reusable scratch space. Not safe for
// concurrent use; each View owns one.
type sharer struct {
	alloc *allocator.Allocator
	ents  []allocator.Entity
	outs  []allocator.Allocation
}

// allocatorConfig makes the control loop of docs/design.md §4 water-fill one
// entity's budget over brokers: capacity is what the reservation leaves, and
// with one cycle of memory and no activity threshold nothing carries over
// from one computation to the next.
func allocatorConfig(capacity float64) allocator.Config {
	return allocator.Config{Capacity: capacity, SafetyRatio: 1, MemoryCycles: 1, OvercommitConfirmCycles: 1}
}

// Shares splits ent's cluster budget over the live brokers in, writing
// out[i] for in[i] (len(out) ≥ len(in)). minLeadWeight is
// Config.MinLeadWeight.
//
// Reservation: R = min(reservation, limit) is spread by leadership fraction
// (evenly when nobody reports leading a partition). The rest, L − R, is
// water-filled with the allocator's semantics, each broker being one
// allocator entity: its claim is its demand above its reserved part (when
// held back, four times what it used: see heldBackClaim), its cap is
// L − its reserved part, its weight its leadership fraction (floored at
// minLeadWeight). Capacity no claim needs becomes headroom over every live
// broker by the same weights, so a broker whose demand appears between
// rounds is not at zero.
//
// A probe share: no live broker's target is under probeShareFraction of
// L − R split evenly; a broker under it is raised to it with bytes taken
// from the largest targets above it. Without it a broker whose client
// appears while another broker is held back (and claims the rest) stays
// at 0, and at 0 its client moves no byte: the shaper holds nothing it
// could count, the broker never reports it held back, and its share stays
// 0. The three-broker consumer test found a consumer starved so.
//
// Guarantees: Reserved ≤ Target ≤ L for each broker, and Σ Target ≤ L
// exactly: targets are whole bytes/s, floored, so rounding in the float
// arithmetic cannot lift the sum over the limit. Same inputs in the same
// order give the same outputs, bit for bit.
func Shares(ent Entity, in []BrokerInput, minLeadWeight float64, out []Share) {
	var s sharer
	s.shares(ent, in, minLeadWeight, out)
}

func (s *sharer) shares(ent Entity, in []BrokerInput, minLeadWeight float64, out []Share) {
	n := len(in)
	if n == 0 {
		return
	}
	limit := ent.Limit
	reserve := ent.reservation()
	var led float64
	for i := range in {
		led += float64(in[i].Led)
	}
	lead := func(i int) float64 {
		if led == 0 {
			return 1 / float64(n)
		}
		return float64(in[i].Led) / led
	}
	if math.IsInf(limit, 1) {
		for i := range in {
			out[i] = Share{Reserved: math.Floor(reserve * lead(i)), Target: limit}
		}
		return
	}
	limit = math.Floor(limit)
	var reservedSum float64
	for i := range in {
		out[i].Reserved = math.Floor(reserve * lead(i))
		reservedSum += out[i].Reserved
	}
	capacity := max(0, limit-reservedSum)

	probe := math.Floor(capacity * probeShareFraction / float64(n))
	s.ents = s.ents[:0]
	for i := range in {
		over := max(0, in[i].Usage-out[i].Reserved)
		if in[i].HeldBack {
			over = max(over, heldBackClaim(in[i].Usage, probe)-out[i].Reserved)
		}
		// Every live broker must be active to receive headroom; the
		// allocator calls an entity active when its use is above 0. The
		// smallest positive float makes it so without changing any claim.
		over = max(over, math.SmallestNonzeroFloat64)
		s.ents = append(s.ents, allocator.Entity{
			Slot:   uint32(i),
			Weight: max(lead(i), minLeadWeight),
			Limit:  max(0, limit-out[i].Reserved),
			Usage:  over,
		})
	}
	if cap(s.outs) < n {
		s.outs = make([]allocator.Allocation, n)
	}
	s.outs = s.outs[:n]
	if s.alloc == nil {
		s.alloc, _ = allocator.New(allocatorConfig(capacity))
	} else if err := s.alloc.SetConfig(allocatorConfig(capacity)); err != nil {
		panic("cluster: allocator config: " + err.Error()) // capacity is finite and ≥ 0
	}
	if _, err := s.alloc.Cycle(s.ents, s.outs); err != nil {
		panic("cluster: allocator input: " + err.Error()) // inputs are built valid above
	}
	var sum float64
	for i := range in {
		out[i].Target = math.Floor(out[i].Reserved + s.outs[i].DynamicLimit)
		sum += out[i].Target
	}
	// Floors of values whose float sum is within an ulp of the limit sum to
	// at most the limit; this takes any excess left from the largest.
	for sum > limit {
		top := 0
		for i := range out[:n] {
			if out[i].Target > out[top].Target {
				top = i
			}
		}
		cut := min(sum-limit, out[top].Target-out[top].Reserved)
		if cut <= 0 {
			break
		}
		out[top].Target -= cut
		sum -= cut
	}
	probeShares(out[:n], probe)
}

// heldBackGrowth is how much more than it used a held-back broker claims in
// the next round: its demand is hidden by the shaper, so it asks for four
// times what it could move, and keeps asking while it stays held back.
const heldBackGrowth = 4

// heldBackClaim is a held-back broker's whole claim: heldBackGrowth × its
// usage, and at least that many probe shares, so a broker held at the probe
// share with nothing measured still grows.
//
// Why not the limit, as the allocator gives a throttled entity on one host:
// a broker's report is a second old and its client may be a trickle. On a
// real cluster (three Apache Kafka brokers, a Java producer) a broker at the
// probe share held back one metadata reply or one batch, claimed the whole
// limit, was given a third of the budget by its weight, used none of it,
// and fell back: every third round the broker carrying all the traffic lost
// two thirds of its share, and the cluster moved 4.9 of its 6 MB/s. With the
// claim bounded by evidence, what a broker is given and leaves unused is at
// most 3× what it moved; a broker whose demand is real reaches its fair
// share in log4(share ÷ probe) rounds (about 4 from the 1 % probe), and a
// broker already near its share in one. Growth 2 took the agent test of a
// client going quiet (TestClusterBudgetsSplitByLeadershipAndConserve) 5 s
// to hand its share on, against the 3 s it allows.
func heldBackClaim(usage, probe float64) float64 {
	return heldBackGrowth * max(usage, probe)
}

// probeShareFraction is the part of an entity's water-filled budget (its
// limit less its reservation) that sets the probe share: split evenly over
// the live brokers, it is the least target any of them gets.
const probeShareFraction = 0.01

// probeShares raises every target under probe to it, taking the bytes from
// the largest targets, never below probe or their reserved part: Σ Target
// does not change.
func probeShares(out []Share, probe float64) {
	for i := range out {
		for out[i].Target < probe {
			top := 0
			for j := range out {
				if out[j].Target > out[top].Target {
					top = j
				}
			}
			give := min(probe-out[i].Target, out[top].Target-max(probe, out[top].Reserved))
			if top == i || give <= 0 {
				return
			}
			out[top].Target -= give
			out[i].Target += give
		}
	}
}
