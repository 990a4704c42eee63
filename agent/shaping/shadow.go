package shaping

import "github.com/sluice-dev/sluice/maps"

// Shadow holds nothing back: the data path counts and the control loop
// computes and exports, for observing before enforcing.
type Shadow struct{}

var _ Shaper = Shadow{}

func (Shadow) Kind() Kind                                { return KindShadow }
func (Shadow) SetRates(maps.Direction, []Rate) error     { return nil }
func (Shadow) Remove(maps.Direction, uint32) error       { return nil }
func (Shadow) SetCapacity(maps.Direction, float64) error { return nil }
func (Shadow) Held(maps.Direction) ([]Held, error)       { return nil, nil }
func (Shadow) Close() error                              { return nil }
