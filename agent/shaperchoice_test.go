package agent

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/agent/config"
)

// htb and edt drive one interface: more are refused at start, naming the
// key, rather than shaping the first and letting the others through.
func TestChooseShaperRefusesSeveralInterfaces(t *testing.T) {
	for _, s := range []string{"htb", "edt", "auto"} {
		cfg := config.Config{Mode: config.ModeEnforce, Shaper: s, Interfaces: []string{"eth0", "eth1"}}
		_, err := ChooseShaper(cfg, nil, []int{2, 3})
		if err == nil || !strings.HasPrefix(err.Error(), "interfaces: ") || !strings.Contains(err.Error(), "2 are configured") {
			t.Errorf("shaper %s with two interfaces: %v, want a refusal naming interfaces", s, err)
		}
	}
}
