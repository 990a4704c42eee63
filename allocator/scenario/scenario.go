// Package scenario reads `sluice simulate` scenario files (YAML or JSON) and
// plays them through the allocator, cycle by cycle. It is the contract that
// other checks depend on: input keys, defaults, error paths and output JSON.
package scenario

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/allocator"
)

// Scenario is a validated scenario: a direction's parameters, its entities
// and the measured input of each cycle.
type Scenario struct {
	Config   allocator.Config
	Entities []Entity
	Cycles   []Cycle
}

// Entity is a named quota entity with its three parameters.
type Entity struct {
	Name        string
	Reservation float64
	Weight      float64
	Limit       float64 // allocator.Unlimited when omitted or null
}

// Cycle is one control-loop cycle's measured input, indexed like Entities.
type Cycle struct {
	Usage     []float64
	Throttled []bool
}

// ErrInvalid wraps every validation error; the message names the field path.
var ErrInvalid = errors.New("invalid scenario")

// Parse reads a scenario; the format is chosen by the file name's extension
// (.json, else YAML). Every error names the offending field path, as in
// `entities[2].weight: must be > 0`.
func Parse(name string, data []byte) (*Scenario, error) {
	var doc any
	if strings.EqualFold(filepath.Ext(name), ".json") {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
		}
	} else if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
	}
	return fromDocument(doc)
}

func fromDocument(doc any) (*Scenario, error) {
	root, err := asMap("", doc)
	if err != nil {
		return nil, err
	}
	if err := onlyKeys("", root, "capacity", "safety_ratio", "min_demand", "activity_threshold", "min_limit", "memory_cycles", "overcommit_confirm_cycles", "entities", "cycles"); err != nil {
		return nil, err
	}
	s := &Scenario{Config: allocator.DefaultConfig(0)}
	cfg := &s.Config
	capacity, ok := root["capacity"]
	if !ok {
		return nil, invalid("capacity", "is required")
	}
	if cfg.Capacity, err = number("capacity", capacity, atLeast(0)); err != nil {
		return nil, err
	}
	numbers := []struct {
		key   string
		dst   *float64
		check func(float64) string
	}{
		{"safety_ratio", &cfg.SafetyRatio, func(v float64) string {
			if v > 0 && v <= 1 {
				return ""
			}
			return "must be in (0, 1]"
		}},
		{"min_demand", &cfg.MinDemand, atLeast(0)},
		{"activity_threshold", &cfg.ActivityThreshold, atLeast(0)},
		{"min_limit", &cfg.MinLimit, atLeast(0)},
	}
	for _, n := range numbers {
		if v, ok := root[n.key]; ok {
			if *n.dst, err = number(n.key, v, n.check); err != nil {
				return nil, err
			}
		}
	}
	for _, n := range []struct {
		key string
		dst *int
	}{{"memory_cycles", &cfg.MemoryCycles}, {"overcommit_confirm_cycles", &cfg.OvercommitConfirmCycles}} {
		if v, ok := root[n.key]; ok {
			if *n.dst, err = integer(n.key, v, 1); err != nil {
				return nil, err
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	index := map[string]int{}
	if s.Entities, err = entities(root["entities"], index); err != nil {
		return nil, err
	}
	if s.Cycles, err = cycles(root["cycles"], index); err != nil {
		return nil, err
	}
	return s, nil
}

func entities(v any, index map[string]int) ([]Entity, error) {
	if v == nil {
		return nil, nil
	}
	list, err := asList("entities", v)
	if err != nil {
		return nil, err
	}
	out := make([]Entity, len(list))
	for i, item := range list {
		path := fmt.Sprintf("entities[%d]", i)
		m, err := asMap(path, item)
		if err != nil {
			return nil, err
		}
		if err := onlyKeys(path, m, "name", "reservation", "weight", "limit"); err != nil {
			return nil, err
		}
		e := Entity{Weight: 1, Limit: allocator.Unlimited}
		name, ok := m["name"].(string)
		if !ok || name == "" {
			return nil, invalid(path+".name", "must be a non-empty string")
		}
		if prev, dup := index[name]; dup {
			return nil, invalid(path+".name", fmt.Sprintf("%q is already entities[%d]", name, prev))
		}
		e.Name = name
		index[name] = i
		if r, ok := m["reservation"]; ok && r != nil {
			if e.Reservation, err = number(path+".reservation", r, atLeast(0)); err != nil {
				return nil, err
			}
		}
		if w, ok := m["weight"]; ok && w != nil {
			if e.Weight, err = number(path+".weight", w, func(v float64) string {
				if v > 0 {
					return ""
				}
				return "must be > 0"
			}); err != nil {
				return nil, err
			}
		}
		if l, ok := m["limit"]; ok && l != nil {
			if e.Limit, err = number(path+".limit", l, atLeast(0)); err != nil {
				return nil, err
			}
		}
		out[i] = e
	}
	return out, nil
}

func cycles(v any, index map[string]int) ([]Cycle, error) {
	if v == nil {
		return nil, nil
	}
	list, err := asList("cycles", v)
	if err != nil {
		return nil, err
	}
	out := make([]Cycle, len(list))
	for i, item := range list {
		path := fmt.Sprintf("cycles[%d]", i)
		c := Cycle{Usage: make([]float64, len(index)), Throttled: make([]bool, len(index))}
		m, err := asMap(path, item)
		if err != nil {
			return nil, err
		}
		if err := onlyKeys(path, m, "usage", "throttled"); err != nil {
			return nil, err
		}
		if u, ok := m["usage"]; ok && u != nil {
			usage, err := asMap(path+".usage", u)
			if err != nil {
				return nil, err
			}
			for _, name := range slices.Sorted(maps.Keys(usage)) {
				p := path + ".usage." + name
				at, known := index[name]
				if !known {
					return nil, invalid(p, "is not a declared entity")
				}
				if c.Usage[at], err = number(p, usage[name], atLeast(0)); err != nil {
					return nil, err
				}
			}
		}
		if th, ok := m["throttled"]; ok && th != nil {
			names, err := asList(path+".throttled", th)
			if err != nil {
				return nil, err
			}
			for j, n := range names {
				p := fmt.Sprintf("%s.throttled[%d]", path, j)
				name, ok := n.(string)
				if !ok {
					return nil, invalid(p, "must be an entity name")
				}
				at, known := index[name]
				if !known {
					return nil, invalid(p, fmt.Sprintf("%q is not a declared entity", name))
				}
				c.Throttled[at] = true
			}
		}
		out[i] = c
	}
	return out, nil
}

func invalid(path, why string) error { return fmt.Errorf("%w: %s: %s", ErrInvalid, path, why) }

func atLeast(lo float64) func(float64) string {
	return func(v float64) string {
		if v >= lo {
			return ""
		}
		return fmt.Sprintf("must be >= %v", lo)
	}
}

// number accepts YAML and JSON numbers, finite only, and applies check.
func number(path string, v any, check func(float64) string) (float64, error) {
	var f float64
	switch n := v.(type) {
	case int:
		f = float64(n)
	case int64:
		f = float64(n)
	case uint64:
		f = float64(n)
	case float64:
		f = n
	case json.Number:
		var err error
		if f, err = n.Float64(); err != nil {
			return 0, invalid(path, fmt.Sprintf("%q is not a number", n))
		}
	default:
		return 0, invalid(path, fmt.Sprintf("must be a number (got %v)", describe(v)))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, invalid(path, "must be a finite number")
	}
	if why := check(f); why != "" {
		return 0, invalid(path, fmt.Sprintf("%s (got %v)", why, f))
	}
	return f, nil
}

func integer(path string, v any, lo int) (int, error) {
	f, err := number(path, v, atLeast(float64(lo)))
	if err != nil {
		return 0, err
	}
	if f != math.Trunc(f) || f > 1<<31 {
		return 0, invalid(path, fmt.Sprintf("must be a whole number (got %v)", f))
	}
	return int(f), nil
}

func asMap(path string, v any) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		where := path
		if where == "" {
			where = "scenario"
		}
		return nil, invalid(where, fmt.Sprintf("must be a mapping (got %v)", describe(v)))
	}
	return m, nil
}

func asList(path string, v any) ([]any, error) {
	l, ok := v.([]any)
	if !ok {
		return nil, invalid(path, fmt.Sprintf("must be a list (got %v)", describe(v)))
	}
	return l, nil
}

// onlyKeys rejects unknown keys: a misspelt key must not silently fall back
// to a default.
func onlyKeys(path string, m map[string]any, allowed ...string) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		found := false
		for _, a := range allowed {
			found = found || a == k
		}
		if !found {
			p := k
			if path != "" {
				p = path + "." + k
			}
			return invalid(p, fmt.Sprintf("unknown key (valid keys: %s)", strings.Join(allowed, ", ")))
		}
	}
	return nil
}

func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("string %q", v)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	default:
		return fmt.Sprintf("%v", v)
	}
}
