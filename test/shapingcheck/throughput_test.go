package main

import "testing"

// runs repeats a pattern of ratios to n runs.
func runs(n int, pattern ...float64) []float64 {
	out := make([]float64, 0, n)
	for len(out) < n {
		out = append(out, pattern[len(out)%len(pattern)])
	}
	return out
}

func TestSequentialVerdict(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ratios        []float64
		pass, decided bool
	}{
		// The spread of single runs seen in the suite (sd ~0.12).
		{"a clear pass stops after a block", runs(16, 1.0, 1.02, 0.99, 1.01), true, true},
		{"a mean near the gate runs another block", runs(16, 0.95+0.12, 0.95-0.12), true, false},
		{"still near after two blocks runs the third", runs(32, 0.95+0.12, 0.95-0.12), true, false},
		{"the last block judges on all runs", runs(48, 0.95+0.12, 0.95-0.12), true, true},
		{"below the gate at the last block fails", runs(48, 0.88+0.12, 0.88-0.12), false, true},
		{"a clear failure stops after a block", runs(16, 0.70, 0.72, 0.69), false, true},
		{"below the gate but not clear runs on", runs(16, 0.88+0.12, 0.88-0.12), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pass, decided := sequentialVerdict(tc.ratios, 0.90)
			if pass != tc.pass || decided != tc.decided {
				t.Errorf("mean %.3f, standard error %.4f: pass %v decided %v, want %v %v",
					geometricMean(tc.ratios), standardError(tc.ratios), pass, decided, tc.pass, tc.decided)
			}
		})
	}
}
