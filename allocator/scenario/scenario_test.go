package scenario

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

// The embedded worked examples must reproduce docs/design.md §4's numbers
// through the file contract (parse, run, round).
func TestExamplesMatchDesign(t *testing.T) {
	want := map[string][]map[string]float64{
		"1-normal-allocation.yaml": {{"A": 636.36, "B": 300, "Cbf": 63.64}},
		"2-contention-reclaims.yaml": {
			{"A": 636.36, "B": 300, "Cbf": 63.64},
			{"B": 585.71, "A": 285.71, "Cbf": 28.57},
			{"B": 350, "A": 500, "Cbf": 50},
		},
		"3-overcommit.yaml":       {{"tp-A": 500, "tp-B": 500}, {"tp-A": 500, "tp-B": 500}, {"tp-A": 500, "tp-B": 500}},
		"4-paper-overcommit.yaml": {{"X": 571.43, "Y": 428.57, "Z": 850}, {"X": 760.71, "Y": 428.57, "Z": 189.29}},
	}
	examples := Examples()
	if len(examples) != len(want) {
		t.Fatalf("%d embedded examples, want %d", len(examples), len(want))
	}
	for _, ex := range examples {
		s, err := Parse(ex.Name, ex.Data)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(s)
		if err != nil {
			t.Fatal(err)
		}
		cycles := want[ex.Name]
		if len(res.Cycles) != len(cycles) {
			t.Fatalf("%s: %d cycles, want %d", ex.Name, len(res.Cycles), len(cycles))
		}
		for n, limits := range cycles {
			for name, limit := range limits {
				got := res.Cycles[n].Entities[name].DynamicLimit
				if math.Abs(got-limit) > 0.01 {
					t.Errorf("%s cycle %d %s: %v, want %v", ex.Name, n+1, name, got, limit)
				}
			}
		}
	}
}

func TestOutputContract(t *testing.T) {
	s, err := Parse("x.yaml", []byte(`
capacity: 1000
safety_ratio: 0.9
entities:
  - {name: A, reservation: 0, weight: 1, limit: 800}
  - {name: B, reservation: 300}
  - {name: Cbf, weight: 0.1}
  - {name: Z, limit: null}
cycles:
  - usage: {A: 800, B: 200, Cbf: 100}
    throttled: [A, Z]
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cycles []map[string]json.RawMessage `json:"cycles"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	c := doc.Cycles[0]
	for _, key := range []string{"C", "H", "scale", "promised_ratio", "overcommit", "entities"} {
		if _, ok := c[key]; !ok {
			t.Errorf("cycle output lacks %q: %s", key, data)
		}
	}
	if string(c["C"]) != "900" || string(c["H"]) != "100" || string(c["promised_ratio"]) != "0.333" {
		t.Errorf("C %s H %s promised_ratio %s", c["C"], c["H"], c["promised_ratio"])
	}
	var ents map[string]map[string]json.RawMessage
	if err := json.Unmarshal(c["entities"], &ents); err != nil {
		t.Fatal(err)
	}
	if got := string(ents["Z"]["demand"]); got != "null" {
		t.Errorf("throttled unlimited Z demand %s, want null", got)
	}
	if got := string(ents["Z"]["state"]); got != `"standby"` {
		t.Errorf("Z used nothing: state %s, want standby", got)
	}
	a := ents["A"]
	for key, want := range map[string]string{"state": `"active"`, "effective_reservation": "0", "demand": "800", "green": "0", "extra": "636.36", "headroom": "0", "dynamic_limit": "636.36"} {
		if string(a[key]) != want {
			t.Errorf("A.%s = %s, want %s", key, a[key], want)
		}
	}
}

func TestJSONInputMatchesYAML(t *testing.T) {
	js := `{"capacity":1000,"safety_ratio":0.9,"entities":[{"name":"A","limit":800},{"name":"B","reservation":300},{"name":"Cbf","weight":0.1}],
	"cycles":[{"usage":{"A":800,"B":200,"Cbf":100},"throttled":["A"]}]}`
	s, err := Parse("ex.json", []byte(js))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Cycles[0].Entities["A"].DynamicLimit; got != 636.36 {
		t.Errorf("A %v, want 636.36", got)
	}
}

func TestInvalidScenariosNameTheField(t *testing.T) {
	cases := []struct{ doc, path string }{
		{`safety_ratio: 0.5`, "capacity: is required"},
		{`capacity: -1`, "capacity: must be >= 0"},
		{`{capacity: 10, safety_ratio: 0}`, "safety_ratio: must be in (0, 1]"},
		{`{capacity: 10, memory_cycles: 0}`, "memory_cycles: must be >= 1"},
		{`{capacity: 10, memory_cycles: 1.5}`, "memory_cycles: must be a whole number"},
		{`{capacity: 10, overcommit_confirm_cycles: -2}`, "overcommit_confirm_cycles: must be >= 1"},
		{`{capacity: 10, capcity: 5}`, "capcity: unknown key"},
		{`{capacity: "lots"}`, "capacity: must be a number"},
		{`{capacity: 10, entities: [{name: a}, {name: b}, {name: c, weight: 0}]}`, "entities[2].weight: must be > 0"},
		{`{capacity: 10, entities: [{name: a}, {name: a}]}`, `entities[1].name: "a" is already entities[0]`},
		{`{capacity: 10, entities: [{weight: 1}]}`, "entities[0].name: must be a non-empty string"},
		{`{capacity: 10, entities: [{name: a, reservation: -3}]}`, "entities[0].reservation: must be >= 0"},
		{`{capacity: 10, entities: [{name: a, limit: -3}]}`, "entities[0].limit: must be >= 0"},
		{`{capacity: 10, entities: [{name: a, wieght: 2}]}`, "entities[0].wieght: unknown key"},
		{`{capacity: 10, entities: [{name: a}], cycles: [{usage: {b: 1}}]}`, "cycles[0].usage.b: is not a declared entity"},
		{`{capacity: 10, entities: [{name: a}], cycles: [{usage: {a: -1}}]}`, "cycles[0].usage.a: must be >= 0"},
		{`{capacity: 10, entities: [{name: a}], cycles: [{}, {throttled: [a, b]}]}`, `cycles[1].throttled[1]: "b" is not a declared entity`},
		{`{capacity: 10, entities: {a: 1}}`, "entities: must be a list"},
		{`[1, 2]`, "scenario: must be a mapping"},
		{"capacity: [", "invalid scenario: bad.yaml"},
	}
	for _, c := range cases {
		_, err := Parse("bad.yaml", []byte(c.doc))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s:\n  got  %v\n  want %q", c.doc, err, c.path)
		}
	}
}
