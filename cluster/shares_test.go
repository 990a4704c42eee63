package cluster

import (
	"math"
	"math/rand/v2"
	"testing"
)

const mb = 1_000_000 // bytes/s in one MB/s

// The worked examples of docs/cluster-budgets.md: a tenant with a 30 MB/s
// cluster limit whose partitions lead 80/15/5 on three brokers (16, 3 and 1
// of 20 partitions).
var led801505 = [3]uint32{16, 3, 1}

func inputs(usage [3]float64, held [3]bool) []BrokerInput {
	in := make([]BrokerInput, 3)
	for i := range in {
		in[i] = BrokerInput{Usage: usage[i] * mb, HeldBack: held[i], Led: led801505[i]}
	}
	return in
}

func checkShares(t *testing.T, ent Entity, in []BrokerInput, wantReserved, wantTarget [3]float64) {
	t.Helper()
	out := make([]Share, len(in))
	Shares(ent, in, 0.01, out)
	var sum float64
	for i := range out {
		sum += out[i].Target
		if math.Abs(out[i].Reserved-wantReserved[i]*mb) > 1 || math.Abs(out[i].Target-wantTarget[i]*mb) > 1 {
			t.Errorf("broker %d: reserved %.0f target %.0f, want %.0f and %.0f", i, out[i].Reserved, out[i].Target, wantReserved[i]*mb, wantTarget[i]*mb)
		}
	}
	if sum > ent.Limit {
		t.Errorf("Σ targets %.0f > limit %.0f", sum, ent.Limit)
	}
}

func TestSharesDemandAboveLimit(t *testing.T) {
	// Every broker held back at the share it has: each claims 4× what it
	// moved, more than the water level, so the 24 MB/s the reservation
	// leaves goes by leadership, 0.80 : 0.15 : 0.05. Kafka's per-broker
	// quota of 30 would allow 90 in total.
	ent := Entity{ID: "tenant", Limit: 30 * mb, Reservation: 6 * mb}
	checkShares(t, ent, inputs([3]float64{24, 4.5, 1.5}, [3]bool{true, true, true}),
		[3]float64{4.8, 0.9, 0.3}, [3]float64{24, 4.5, 1.5})
}

func TestSharesDemandBelowLimit(t *testing.T) {
	// 10 + 3 + 1 MB/s, nobody held back: every claim (use above the
	// reserved part: 5.2, 2.1, 0.7) is met and the 16 MB/s left become
	// headroom by leadership (12.8, 2.4, 0.8), so growth is served at once.
	ent := Entity{ID: "tenant", Limit: 30 * mb, Reservation: 6 * mb}
	checkShares(t, ent, inputs([3]float64{10, 3, 1}, [3]bool{}),
		[3]float64{4.8, 0.9, 0.3}, [3]float64{22.8, 5.4, 1.8})
}

func TestSharesOneBrokerHeldBack(t *testing.T) {
	// The leader of 80 % is held back at 22.8, the others use 3 and 1: their
	// claims (2.1 and 0.7) sit below the water level, so they are met and
	// the leader, claiming 4× what it moved, gets the rest, 21.2 above
	// its 4.8 reserved.
	ent := Entity{ID: "tenant", Limit: 30 * mb, Reservation: 6 * mb}
	checkShares(t, ent, inputs([3]float64{22.8, 3, 1}, [3]bool{true, false, false}),
		[3]float64{4.8, 0.9, 0.3}, [3]float64{26, 3, 1})
}

func TestSharesHeldBackClaimsFourTimesItsUsage(t *testing.T) {
	// The leader of 80 % is held back having moved 5: it claims 20 (15.2
	// above its reserved 4.8), not the limit; with the others' claims (2.1,
	// 0.7) 6 of the 24 MB/s are left, and they go to every broker as
	// headroom by leadership (4.8, 0.9, 0.3).
	ent := Entity{ID: "tenant", Limit: 30 * mb, Reservation: 6 * mb}
	checkShares(t, ent, inputs([3]float64{5, 3, 1}, [3]bool{true, false, false}),
		[3]float64{4.8, 0.9, 0.3}, [3]float64{24.8, 3.9, 1.3})
}

// TestSharesTrickleAtProbeShareDoesNotTakeTheBudget is the flip three real
// Apache Kafka brokers showed: the broker carrying a Java producer's traffic
// is held back at 5.96 of 6 MB/s; another, at the probe share (20 kB/s),
// held back one batch. Claiming the limit, the second was given half the
// budget by its weight, used none of it, and fell back the round after;
// claiming four times its usage it is given 80 kB/s.
func TestSharesTrickleAtProbeShareDoesNotTakeTheBudget(t *testing.T) {
	ent := Entity{ID: "producer", Limit: 6 * mb}
	probe := 6 * mb * probeShareFraction / 3
	in := []BrokerInput{{Usage: probe, HeldBack: true, Led: 1}, {Usage: 5.96 * mb, HeldBack: true, Led: 1}, {Led: 1}}
	checkShares(t, ent, in, [3]float64{}, [3]float64{4 * probe / mb, 6 - 5*probe/mb, probe / mb})
}

func TestSharesReservationHeldWhereUnused(t *testing.T) {
	// Reservation 15: pre-spread 12 / 2.25 / 0.75 before any demand, and
	// kept where unused (broker 0 uses 2 of its 12); the 15 MB/s above the
	// reservation go to the one broker held back, which moved 9 and claims
	// 36.
	ent := Entity{ID: "tenant", Limit: 30 * mb, Reservation: 15 * mb}
	checkShares(t, ent, inputs([3]float64{2, 9, 0}, [3]bool{false, true, false}),
		[3]float64{12, 2.25, 0.75}, [3]float64{12, 17.25, 0.75})
}

func TestSharesIdleEntitySpreadsByLeadership(t *testing.T) {
	ent := Entity{ID: "tenant", Limit: 30 * mb}
	checkShares(t, ent, inputs([3]float64{}, [3]bool{}), [3]float64{}, [3]float64{24, 4.5, 1.5})
}

func TestSharesNoLeadershipReportedSplitsEvenly(t *testing.T) {
	ent := Entity{ID: "tenant", Limit: 30 * mb, Reservation: 3 * mb}
	in := []BrokerInput{{HeldBack: true}, {HeldBack: true}, {HeldBack: true}}
	out := make([]Share, 3)
	Shares(ent, in, 0.01, out)
	for i := range out {
		if out[i].Reserved != 1*mb || out[i].Target != 10*mb {
			t.Errorf("broker %d: %+v, want reserved 1 MB/s, target 10 MB/s", i, out[i])
		}
	}
}

func TestSharesUnlimitedEntityKeepsReservationSpread(t *testing.T) {
	ent := Entity{ID: "tenant", Limit: math.Inf(1), Reservation: 10 * mb}
	out := make([]Share, 3)
	Shares(ent, inputs([3]float64{}, [3]bool{}), 0.01, out)
	if out[0].Reserved != 8*mb || !math.IsInf(out[0].Target, 1) {
		t.Errorf("got %+v, want reserved 8 MB/s and an unlimited target", out[0])
	}
}

// TestSharesProperties: for random inputs, reserved ≤ target ≤ limit and
// Σ targets ≤ limit exactly, and the result is the same when computed twice.
func TestSharesProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var s sharer
	for range 20000 {
		n := 1 + rng.IntN(12)
		limit := math.Floor(rng.Float64() * 1e9)
		ent := Entity{ID: "e", Limit: limit + rng.Float64(), Reservation: rng.Float64() * 1.2 * limit}
		in := make([]BrokerInput, n)
		for i := range in {
			in[i] = BrokerInput{Usage: rng.Float64() * limit, HeldBack: rng.IntN(3) == 0, Led: uint32(rng.IntN(5))}
		}
		out, again := make([]Share, n), make([]Share, n)
		s.shares(ent, in, 0.01, out)
		Shares(ent, in, 0.01, again)
		var sum float64
		for i := range out {
			if out[i] != again[i] {
				t.Fatalf("not deterministic: %+v vs %+v", out[i], again[i])
			}
			if out[i].Reserved > out[i].Target || out[i].Target > limit || out[i].Target != math.Floor(out[i].Target) {
				t.Fatalf("broker %d: %+v outside [reserved, %v] or not whole", i, out[i], limit)
			}
			sum += out[i].Target
		}
		if sum > limit {
			t.Fatalf("Σ targets %v > limit %v", sum, limit)
		}
	}
}

// TestSharesProbeShare: a broker held back claims the rest; the brokers
// whose clients have not sent a byte yet keep a probe share (1 % of the
// limit less the reservation, split over the live brokers), so that a client
// arriving there moves bytes, is seen held back and claims its part. Σ
// stays the limit.
func TestSharesProbeShare(t *testing.T) {
	ent := Entity{ID: "reader", Limit: 6 * mb}
	probe := 6 * mb * probeShareFraction / 3
	checkShares(t, ent, []BrokerInput{{Usage: 6 * mb, HeldBack: true, Led: 16}, {Led: 2}, {Led: 2}},
		[3]float64{0, 0, 0}, [3]float64{6 - 2*probe/mb, probe / mb, probe / mb})
}
