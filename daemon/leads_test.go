package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/objectives"
	"github.com/sluice-dev/sluice/internal/hoststate"
)

func TestLeadsFile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(hoststate.DirEnv, filepath.Join(dir, "state"))
	f := newLeadsFile()
	if l, err := f.LoadLeads(); err != nil || l != nil {
		t.Fatalf("no file: %+v, %v: want nothing, no error (a first start)", l, err)
	}
	leads := []objectives.Lead{{Objective: entity.Objective{Key: entity.Key{Kind: entity.KindClient, Name: "core"}, Direction: entity.Produce, P99: 9 * time.Millisecond}, Lead: entity.Fetch}}
	if err := f.SaveLeads(leads); err != nil {
		t.Fatal(err)
	}
	back, err := f.LoadLeads()
	if err != nil || len(back) != 1 || back[0] != leads[0] {
		t.Fatalf("read back %+v, %v: want %+v", back, err, leads)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "state"))
	if len(entries) != 1 || entries[0].Name() != leadsFileName {
		t.Fatalf("state directory holds %v: want only %s (no temporary file left)", entries, leadsFileName)
	}
	if info, err := os.Stat(filepath.Join(dir, "state")); err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("state directory: %v, %v: want 0700", info, err)
	}
	// Not sluice's file: an error naming it, nothing used.
	if err := os.WriteFile(f.path, []byte("{\"version\": 1, \"leads\": [{\"kind\": 2}]}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if l, err := f.LoadLeads(); err == nil || l != nil || !strings.Contains(err.Error(), f.path) {
		t.Fatalf("a foreign file: %+v, %v: want an error naming %s", l, err, f.path)
	}
	huge := make([]byte, objectives.MaxLeadsFileBytes+10)
	for i := range huge {
		huge[i] = ' '
	}
	if err := os.WriteFile(f.path, huge, 0o600); err != nil {
		t.Fatal(err)
	}
	if l, err := f.LoadLeads(); err == nil || l != nil {
		t.Fatalf("an oversized file: %+v, %v: want an error", l, err)
	}
}
