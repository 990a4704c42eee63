package maps

import (
	"os"
	"path/filepath"
	"testing"
)

// The record of sluice's host objects: entries by kind and interface
// index keep the device's name, are forgotten one by one, read as empty
// when nothing was recorded, and the pin is one unload takes as sluice's.
func TestOwnedRecord(t *testing.T) {
	dir := filepath.Join(bpffs(t), "sluice")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if got, err := Owned(dir, OwnedClsact); err != nil || len(got) != 0 {
		t.Fatalf("no record yet: %v %v", got, err)
	}
	for _, r := range []struct {
		kind OwnedKind
		idx  int
		name string
	}{{OwnedClsact, 2, "eth0"}, {OwnedClsact, 3, "eth1-with-a-long-name"}, {OwnedIFB, 2, "slifb2"}} {
		if err := RecordOwned(dir, r.kind, r.idx, r.name); err != nil {
			t.Fatal(err)
		}
	}
	clsact, _ := Owned(dir, OwnedClsact)
	ifbs, _ := Owned(dir, OwnedIFB)
	if len(clsact) != 2 || clsact[2] != "eth0" || clsact[3] != "eth1-with-a-long" || len(ifbs) != 1 || ifbs[2] != "slifb2" {
		t.Errorf("read back: clsact %v, ifbs %v", clsact, ifbs)
	}
	if err := ForgetOwned(dir, OwnedClsact, 2); err != nil {
		t.Fatal(err)
	}
	if err := ForgetOwned(dir, OwnedClsact, 9); err != nil {
		t.Errorf("forgetting what is not there: %v", err)
	}
	if clsact, _ := Owned(dir, OwnedClsact); len(clsact) != 1 || clsact[3] == "" {
		t.Errorf("after forgetting eth0: %v", clsact)
	}
	if !ownPin(OwnedRecordPin) {
		t.Error("unload would leave the record behind as a foreign pin")
	}
}
