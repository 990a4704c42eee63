package agent

import "fmt"

// rateWindows keeps, per entity id, the bytes of its last w intervals
// (rate_window) and their sum. Each id's samples are a ring with the sum
// kept beside it, so a cycle writes one sample and reads one sum per id
// and direction instead of shifting and re-adding w of them
// (BenchmarkControlCycle, #47).
//
// The sums are integers, not floats: bytes are whole, so adding the new
// sample and taking out the one it overwrites is exact, and a sum kept for
// months cannot drift from its samples as a float sum would (nor needs
// re-adding now and then to stop it). uint64 arithmetic is modular, so
// even a sum that wrapped is exact again once its samples fit.
//
// A window is sized at start: rate_window needs a restart (Reload refuses
// a change), and a restart builds new, empty windows.
type rateWindows struct {
	w int
	// samples[id*w : id*w+w] is id's ring. Slots not yet filled are zero,
	// so the sum is the sum of the whole ring.
	samples []uint64
	state   []windowState
}

type windowState struct {
	sum    uint64 // of the ring's samples
	head   uint16 // ring index of the newest sample
	filled uint16 // samples in the window: pushed since it started, at most w
}

// maxRateWindow is the widest window the per-id indexes can hold.
const maxRateWindow = 1<<16 - 1

func newRateWindows(ids, w int) rateWindows {
	if w < 1 || w > maxRateWindow {
		panic(fmt.Sprintf("rate window of %d intervals: want 1 to %d", w, maxRateWindow))
	}
	return rateWindows{w: w, samples: make([]uint64, ids*w), state: make([]windowState, ids)}
}

// push makes bytes id's newest sample; the oldest leaves a full window.
func (r *rateWindows) push(id int, bytes uint64) {
	s := &r.state[id]
	h := int(s.head) + 1
	if h == r.w {
		h = 0
	}
	slot := &r.samples[id*r.w+h]
	s.sum += bytes - *slot // wraps and comes back: exact (see above)
	*slot = bytes
	s.head = uint16(h)
	if int(s.filled) < r.w {
		s.filled++
	}
}

// window returns the sum of id's window and how many samples it holds.
func (r *rateWindows) window(id int) (sum uint64, filled int) {
	s := r.state[id]
	return s.sum, int(s.filled)
}

// newest returns the sum of id's newest k samples (at most those it holds)
// and how many that is.
func (r *rateWindows) newest(id, k int) (sum uint64, n int) {
	s := r.state[id]
	if k >= int(s.filled) {
		return s.sum, int(s.filled)
	}
	ring := r.samples[id*r.w : (id+1)*r.w]
	for i, h := 0, int(s.head); i < k; i++ {
		sum += ring[h]
		if h--; h < 0 {
			h = r.w - 1
		}
	}
	return sum, k
}

// clear empties id's window: an id given to a new entity starts afresh.
func (r *rateWindows) clear(id int) {
	clear(r.samples[id*r.w : (id+1)*r.w])
	r.state[id] = windowState{}
}
