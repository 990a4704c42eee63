package e2e

import (
	"errors"
	"fmt"
	"time"
)

// untilStable looks until two looks a second apart agree (and neither
// failed), at most timeout: the bindings a scenario reads before it
// measures have stopped moving.
func untilStable(look func() (string, error), timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	prev, err := look()
	for {
		time.Sleep(time.Second) // the second look, a second later
		cur, cerr := look()
		if err == nil && cerr == nil && cur == prev {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bindings still moving after %v: %v", timeout, errors.Join(err, cerr))
		}
		prev, err = cur, cerr
	}
}
