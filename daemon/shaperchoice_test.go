package daemon

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/agent"
	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/internal/netns"
	"github.com/sluice-dev/sluice/maps"
)

// edt drives one interface: more are refused at start, naming the key,
// rather than shaping the first and letting the others through.
func TestChooseShaperEDTRefusesSeveralInterfaces(t *testing.T) {
	cfg := config.Config{Mode: config.ModeEnforce, Shaper: "edt", Interfaces: []string{"eth0", "eth1"}}
	_, err := ChooseShaper(cfg, nil, []int{2, 3})
	if err == nil || !strings.HasPrefix(err.Error(), "interfaces: ") || !strings.Contains(err.Error(), "2 are configured") {
		t.Errorf("edt with two interfaces: %v, want a refusal naming interfaces", err)
	}
}

// htb and auto on several interfaces build one shared tree per direction:
// an ingress and an egress IFB, both handed to the data path.
func TestChooseShaperSharesOneTreeAcrossInterfaces(t *testing.T) {
	netns.RequireRoot(t, "builds namespaces and IFB devices, loads BPF programs")
	pair := netns.NewPair(t)
	second := pair.BrokerDev + "x"
	if err := netns.Veth(pair.Broker, second, netip.MustParsePrefix("198.18.1.1/24"), pair.Client, pair.ClientDev+"x", netip.MustParsePrefix("198.18.1.2/24")); err != nil {
		t.Fatal(err)
	}
	opts := maps.DefaultOptions()
	opts.MaxEntities, opts.MaxConnections = 64, 4096
	dp, err := maps.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	var ifindexes []int
	for _, dev := range []string{pair.BrokerDev, second} {
		idx, err := pair.Broker.Index(dev)
		if err != nil {
			t.Fatal(err)
		}
		ifindexes = append(ifindexes, idx)
	}
	for _, s := range []string{"htb", "auto"} {
		cfg := config.Config{Mode: config.ModeEnforce, Shaper: s, Interfaces: []string{pair.BrokerDev, second}}
		var choice agent.ShaperChoice
		if err := pair.Broker.Do(func() (err error) {
			choice, err = ChooseShaper(cfg, dp, ifindexes)
			return err
		}); err != nil {
			t.Fatalf("shaper %s on two interfaces: %v", s, err)
		}
		if choice.Shaper.Kind() != "htb" || choice.IFBIndex == 0 || choice.EgressIFBIndex == 0 || choice.IFBIndex == choice.EgressIFBIndex ||
			!strings.Contains(choice.Reason, "shared by every interface") {
			t.Errorf("shaper %s on two interfaces: %+v, want htb with an ingress and an egress IFB", s, choice)
		}
		if err := pair.Broker.Do(choice.Shaper.Close); err != nil {
			t.Errorf("close: %v", err)
		}
	}
}
