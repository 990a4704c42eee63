package main

import "testing"

func TestHierarchyJudge(t *testing.T) {
	const res, capacity = 10.0, 40.0
	flat := func(n int, reserved, total float64) hierWindows {
		var w hierWindows
		for range n {
			w.reserved = append(w.reserved, reserved)
			w.total = append(w.total, total)
			w.stolen = append(w.stolen, 0)
		}
		return w
	}
	// Held: every window at the reservation, the total at capacity.
	if v := flat(10, 10, 40).judge(res, capacity); !v.pass() || v.Conclusive != 10 {
		t.Errorf("a held reservation failed: %+v", v)
	}
	// A dip the next window makes up passes; one it does not fails.
	w := flat(10, 10, 40)
	w.reserved[3], w.reserved[4] = 9.0, 10.5
	if v := w.judge(res, capacity); !v.pass() || v.BelowFloor != 1 {
		t.Errorf("a dip made up by the next window failed: %+v", v)
	}
	w.reserved[4] = 9.6
	if v := w.judge(res, capacity); v.pass() || v.ReservationHeld {
		t.Errorf("a dip not made up passed: %+v", v)
	}
	// The crowd taking the reservation in an undisturbed window fails.
	w = flat(10, 10, 40)
	w.reserved[5], w.reserved[6] = 6, 6
	if v := w.judge(res, capacity); v.pass() {
		t.Errorf("a starved reservation passed: %+v", v)
	}
	// The same dip where the host took 40 % of the window is the host's:
	// the floor keeps 60 %, in the window and the one after (whose
	// catch-up may pass the bound by what the stall held up).
	w.stolen[5] = 0.04
	w.total[6] = 47
	if v := w.judge(res, capacity); !v.pass() || v.HostTook != 1 {
		t.Errorf("a dip during stolen time failed: %+v", v)
	}
	// Steal never excuses more than it took: 10 ms of the window does not
	// explain 40 % less.
	w.stolen[5] = 0.01
	if v := w.judge(res, capacity); v.pass() {
		t.Errorf("a dip larger than the stolen time passed: %+v", v)
	}
	// An excess in an undisturbed window fails.
	w = flat(10, 10, 40)
	w.total[2] = 44.5
	if v := w.judge(res, capacity); v.pass() || v.CapacityHeld {
		t.Errorf("a total above the bound passed: %+v", v)
	}
	// A host that took over half of most windows leaves nothing proven.
	w = flat(10, 10, 40)
	for i := 0; i < 10; i += 2 {
		w.stolen[i] = 0.06
	}
	if v := w.judge(res, capacity); v.pass() || v.EnoughConclusive {
		t.Errorf("a case with too few conclusive windows passed: %+v", v)
	}
}
