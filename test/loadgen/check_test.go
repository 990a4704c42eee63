package main

import "testing"

// The record check sees a lost record, a repeated one and a damaged value,
// and nothing in an intact log.
func TestRecordCheck(t *testing.T) {
	template := value(64)
	for _, c := range []struct {
		name                  string
		offsets               []int64
		damage                int // index of the record whose value is damaged; -1 none
		wantGaps, wantCorrupt int64
	}{
		{"intact", []int64{0, 1, 2, 3}, -1, 0, 0},
		{"lost", []int64{0, 1, 3}, -1, 1, 0},
		{"repeated", []int64{0, 1, 1, 2}, -1, 1, 0},
		{"not from the start", []int64{5, 6}, -1, 1, 0},
		{"damaged", []int64{0, 1, 2}, 1, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc := recordCheck{enabled: true, next: map[stream]int64{}}
			for i, off := range c.offsets {
				v := numbered(template, uint64(i))
				if i == c.damage {
					v[20] ^= 1
				}
				rc.see(0, 0, off, v)
			}
			if rc.records.Load() != int64(len(c.offsets)) || rc.gaps.Load() != c.wantGaps || rc.corrupt.Load() != c.wantCorrupt {
				t.Errorf("records %d gaps %d corrupt %d, want %d %d %d", rc.records.Load(), rc.gaps.Load(), rc.corrupt.Load(),
					len(c.offsets), c.wantGaps, c.wantCorrupt)
			}
		})
	}
	// Partitions are followed separately.
	rc := recordCheck{enabled: true, next: map[stream]int64{}}
	rc.see(0, 0, 0, numbered(template, 0))
	rc.see(0, 1, 0, numbered(template, 1))
	rc.see(0, 0, 1, numbered(template, 2))
	if rc.gaps.Load() != 0 {
		t.Errorf("two partitions read in turn: %d gaps", rc.gaps.Load())
	}
	// Readers (-connections) are followed separately, each from the start.
	rc = recordCheck{enabled: true, next: map[stream]int64{}}
	rc.see(0, 0, 0, numbered(template, 0))
	rc.see(1, 0, 0, numbered(template, 0))
	rc.see(1, 0, 1, numbered(template, 1))
	rc.see(0, 0, 1, numbered(template, 1))
	if rc.gaps.Load() != 0 {
		t.Errorf("two readers of one partition: %d gaps", rc.gaps.Load())
	}
	rc.see(1, 0, 1, numbered(template, 1))
	if rc.gaps.Load() != 1 {
		t.Errorf("a reader repeating an offset: %d gaps, want 1", rc.gaps.Load())
	}
}
