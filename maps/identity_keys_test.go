package maps

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/sluice-dev/sluice/internal/netns"
)

// EachIdentity lists exactly the connections with a saved identity, IPv4
// and IPv6 alike, as the keys they were saved under.
func TestEachIdentityListsTheSavedKeys(t *testing.T) {
	netns.RequireRoot(t, "loads BPF programs")
	opts := testOptions()
	opts.PinDir = filepath.Join(bpffs(t), "sluice")
	d, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); Unpin(opts.PinDir) })
	want := []ConnKey{connKey(client4, broker4, 43001), connKey(client6, broker6, 43002), connKey(client4, broker4, 43003)}
	for _, k := range want {
		if err := d.SaveIdentity(k, Identity{Mechanism: "PLAIN", User: "u"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.ForgetIdentities(want[2:]); err != nil {
		t.Fatal(err)
	}
	var got []ConnKey
	if err := d.EachIdentity(func(k ConnKey) { got = append(got, k) }); err != nil {
		t.Fatal(err)
	}
	key := func(k ConnKey) string { return k.String() }
	if !slices.Equal(sortedBy(got, key), sortedBy(want[:2], key)) {
		t.Errorf("listed %v, want %v", got, want[:2])
	}
}

func sortedBy(ks []ConnKey, key func(ConnKey) string) []string {
	out := make([]string, 0, len(ks))
	for _, k := range ks {
		out = append(out, key(k))
	}
	slices.Sort(out)
	return out
}
