package cluster

import (
	"testing"
	"time"
)

// pair runs two agents over a bus, every tick, for d, and checks Σ applied
// after every step.
type pair struct {
	t      *testing.T
	bus    *bus
	agents []*Agent
	local  [][]Local
	now    time.Duration
	// edit, when set, changes each report before it is sent.
	edit func(*Report)
}

func newPair(t *testing.T) *pair {
	cfg := twoBrokerConfig()
	p := &pair{t: t, bus: &bus{cursors: map[*Agent]int{}}}
	for id := BrokerID(1); id <= 2; id++ {
		p.agents = append(p.agents, startAgent(t, cfg, id, 15*mb, 0))
		p.local = append(p.local, []Local{{Usage: 15 * mb, HeldBack: true, Led: 1}})
	}
	return p
}

// run steps both agents every tick for d; Σ applied must stay at most
// bound throughout.
func (p *pair) run(d time.Duration, bound float64) {
	p.t.Helper()
	for end := p.now + d; p.now < end; p.now += tick {
		for i, a := range p.agents {
			p.bus.read(a, p.now)
			r := a.Step(p.now, p.local[i])
			if r != nil && p.edit != nil {
				p.edit(r)
			}
			p.bus.send(r)
			if sum := p.sum(); sum > bound {
				p.t.Fatalf("at %v: Σ applied %v > %v", p.now, sum, bound)
			}
		}
	}
}

func (p *pair) sum() float64 { return p.agents[0].Applied()[0] + p.agents[1].Applied()[0] }

// A budget changed on one host (Kafka's quota store read there first) is
// split as the smaller of the hosts' budgets: lowered at once, raised only
// when both hosts report the raise; Σ is never above the smaller of the
// old and the new limit once the change is in a round, nor ever above the
// old one.
func TestBudgetChangeSplitsTheSmaller(t *testing.T) {
	p := newPair(t)
	p.run(5*time.Second, 30*mb)
	if s := p.sum(); s < 30*mb-2 {
		t.Fatalf("Σ %v before the change, want the limit", s)
	}
	a1, a2 := p.agents[0], p.agents[1]
	a2.SetBudget(0, Budget{Limit: 20 * mb, Reservation: 0})
	p.run(3*time.Second, 30*mb)
	for i, a := range p.agents {
		if got := a.RoundBudget(0); got.Limit != 20*mb {
			t.Fatalf("agent %d splits %+v three seconds after broker 2 lowered its limit to 20 MB/s", i+1, got)
		}
	}
	p.run(2*time.Second, 20*mb)
	if s := p.sum(); s < 20*mb-2 {
		t.Fatalf("Σ %v, want the lowered limit, 20 MB/s", s)
	}
	// Broker 1 raises first: the round still splits broker 2's 20.
	a1.SetBudget(0, Budget{Limit: 40 * mb})
	p.run(3*time.Second, 20*mb)
	// Broker 2 too: now both report 40.
	a2.SetBudget(0, Budget{Limit: 40 * mb})
	p.run(3*time.Second, 40*mb)
	if s := p.sum(); s < 40*mb-2 {
		t.Fatalf("Σ %v after both raised to 40 MB/s", s)
	}
	if got := a1.Budget(0); got.Limit != 40*mb {
		t.Fatalf("broker 1's own budget %+v", got)
	}
}

// A broker that writes the first format (an agent not yet upgraded) is
// read with this agent's own budget, and this agent writes the first
// format while such a broker is live, so that it stays readable to it.
func TestOldFormatPeer(t *testing.T) {
	p := newPair(t)
	p.edit = func(r *Report) {
		if r.Broker == 2 { // as decoded from the first format
			r.Version = 1
			for e := range r.Entities {
				r.Entities[e].Limit, r.Entities[e].Reservation = 0, 0
			}
		}
	}
	p.run(30*time.Second, 30*mb)
	a1 := p.agents[0]
	if got := a1.RoundBudget(0); got.Limit != 30*mb {
		t.Fatalf("broker 1 splits %+v with a first-format peer, want its own 30 MB/s", got)
	}
	if got := p.sum(); got < 30*mb-2 {
		t.Fatalf("Σ %v, want the limit", got)
	}
	// Broker 1 writes the first format, with a probe in the newest every
	// wireProbeEvery reports (so that an upgraded peer learns it reads it).
	formats := map[uint8]int{}
	var last *Report
	for _, r := range p.bus.log[len(p.bus.log)/2:] {
		if r.Broker == 1 {
			formats[version(r)]++
			last = r
		}
	}
	if formats[1] < 4*formats[WireVersion] || formats[WireVersion] == 0 {
		t.Fatalf("broker 1 wrote formats %v while a first-format broker is live, want mostly 1 and a probe", formats)
	}
	if last.Version == 1 {
		b, err := MarshalReport(last)
		if err != nil || b[len(wireMagic)] != 1 {
			t.Fatalf("encoded as format %d (%v)", b[len(wireMagic)], err)
		}
	}
	p.edit = nil // broker 2 upgraded
	p.run(3*time.Second, 30*mb)
	for _, r := range p.bus.log[len(p.bus.log)-4:] {
		if version(r) != WireVersion {
			t.Fatalf("after broker 2's upgrade broker %d writes format %d, want %d", r.Broker, r.Version, WireVersion)
		}
	}
}
