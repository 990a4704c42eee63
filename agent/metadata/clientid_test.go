package metadata

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/agent/config"
)

// Every agent of a cluster sends its own client-id (one Kafka quota bucket
// each); an agent without a cluster section keeps the one it always sent.
func TestClientIDPerAgent(t *testing.T) {
	alone := config.Default()
	one, two := config.Default(), config.Default()
	for i, c := range []*config.Config{&one, &two} {
		c.Cluster.Enabled, c.Cluster.Name, c.Cluster.BrokerID = true, "east", int32(i+1)
	}
	if got := ClientID(alone); got != "sluice-agent" {
		t.Errorf("without a cluster: %q", got)
	}
	if a, b := ClientID(one), ClientID(two); a != "sluice-agent-east-1" || b != "sluice-agent-east-2" {
		t.Errorf("cluster agents: %q and %q", a, b)
	}
	opts, err := ClientOptions(two)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if id, _ := cl.OptValue(kgo.ClientID).(string); id != "sluice-agent-east-2" {
		t.Errorf("the client sends %q", id)
	}
}
