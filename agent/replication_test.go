package agent

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/learner"
)

type fakeBrokers []learner.Broker

func (f *fakeBrokers) Brokers() []learner.Broker { return *f }

// Brokers the metadata names whose addresses exempt_peers misses are
// named in the status, counted for the metric and logged once per change;
// this host's own broker, and brokers inside exempt_peers, are not. A
// broker whose host did not resolve cannot be known exempt: named.
func TestBrokersOutsideExemptPeersAreShown(t *testing.T) {
	ip := func(s string) []netip.Addr { return []netip.Addr{netip.MustParseAddr(s)} }
	brokers := fakeBrokers{
		{ID: 0, Host: "10.0.0.5", Port: 9092, Addrs: ip("10.0.0.5"), Local: true},
		{ID: 1, Host: "kafka-1", Port: 9092, Addrs: ip("10.0.0.6")},
		{ID: 2, Host: "kafka-2", Port: 9092, Addrs: ip("10.0.1.7")},
		{ID: 3, Host: "kafka-3", Port: 9092},
	}
	r := newRigWith(t, baseConfig+"exempt_peers: [10.0.0.0/24]\n", func(d *Deps) {
		d.NewMetadata = func(config.Config) (Metadata, error) { return Metadata{Brokers: &brokers}, nil }
	})
	s := r.cycle()
	want := []string{"broker 2 kafka-2:9092 (10.0.1.7)", "broker 3 kafka-3:9092 (unresolved)"}
	if !slices.Equal(s.UnexemptBrokers, want) || !slices.Equal(r.a.UnexemptBrokers(), want) {
		t.Errorf("unexempt brokers %v, want %v", s.UnexemptBrokers, want)
	}
	r.cycle()
	if n := strings.Count(r.logs.String(), "brokers of the cluster outside exempt_peers"); n != 1 {
		t.Errorf("logged %d times over two cycles, want once", n)
	}
	brokers = brokers[:2] // kafka-2 and kafka-3 left the cluster
	if s := r.cycle(); len(s.UnexemptBrokers) != 0 {
		t.Errorf("after they left: %v", s.UnexemptBrokers)
	}
}
