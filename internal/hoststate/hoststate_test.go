package hoststate

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// What one agent records is read back as written; the file is the
// owner's only (it names the host's devices), and it goes once no entry is
// left, leaving the directory empty for the package's removal.
func TestRecordRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state") // made by Update
	here := Here()
	if here.Boot == "" || here.NetNS == "" {
		t.Fatalf("Here() = %+v: /proc does not say the boot or the namespace", here)
	}
	err := Update(dir, func(r *Record) {
		e := r.Ensure(here, "/sys/fs/bpf/custom")
		e.AddInterface(2, "eth0")
		e.AddInterface(2, "eth0") // once
		e.AddInterface(7, "eth1")
		e.IFBs = Devices(map[int]string{9: "slifb2"})
		e.Clsact = Devices(map[int]string{7: "eth1"})
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v, want 0600", st.Mode().Perm())
	}
	r, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	mine, others := r.In(here)
	want := Entry{Scope: here, PinPath: "/sys/fs/bpf/custom", Interfaces: []Device{{2, "eth0"}, {7, "eth1"}},
		IFBs: []Device{{9, "slifb2"}}, Clsact: []Device{{7, "eth1"}}}
	if len(mine) != 1 || others != 0 {
		t.Fatalf("read %+v (others %d), want one entry", mine, others)
	}
	got := mine[0]
	got.Updated = time.Time{}
	if fmt.Sprint(got) != fmt.Sprint(want) || !slices.Equal(got.Interfaces, want.Interfaces) || !slices.Equal(got.IFBs, want.IFBs) || !slices.Equal(got.Clsact, want.Clsact) {
		t.Errorf("read back\n %+v\nwant\n %+v", got, want)
	}
	if err := Update(dir, func(r *Record) {
		if !r.Forget(here, "/sys/fs/bpf/custom") {
			t.Error("Forget found no entry")
		}
	}); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left in the state directory once nothing is recorded: %v", left)
	}
	if r, err := Read(filepath.Join(t.TempDir(), "absent")); err != nil || len(r.Entries) != 0 {
		t.Errorf("no record: %+v, %v; want an empty one", r, err)
	}
}

// Entries of an earlier boot are dropped (nothing sluice makes survives a
// reboot and indexes are handed out anew); entries of other network
// namespaces are kept, but not this namespace's to act on.
func TestRecordScopes(t *testing.T) {
	dir := t.TempDir()
	here := Here()
	oldBoot := Scope{Boot: "00000000-0000-0000-0000-000000000000", NetNS: here.NetNS}
	otherNS := Scope{Boot: here.Boot, NetNS: "0:1"}
	for _, s := range []Scope{oldBoot, otherNS, here} {
		if err := Update(dir, func(r *Record) { r.Ensure(s, "/sys/fs/bpf/sluice").AddInterface(3, "eth0") }); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Find(oldBoot, "/sys/fs/bpf/sluice") != nil {
		t.Error("an entry of an earlier boot survived an update")
	}
	mine, others := r.In(here)
	if len(mine) != 1 || others != 1 || r.Find(otherNS, "/sys/fs/bpf/sluice") == nil {
		t.Errorf("entries %+v: want this namespace's and the other's", r.Entries)
	}
}

// Agents in other namespaces and unload update the record concurrently:
// the directory's lock serialises them and no entry is lost.
func TestRecordConcurrentUpdates(t *testing.T) {
	dir := t.TempDir()
	here := Here()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Go(func() {
			errs <- Update(dir, func(r *Record) { r.Ensure(here, fmt.Sprintf("/sys/fs/bpf/p%d", i)) })
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	r, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Entries) != 32 {
		t.Errorf("%d entries after 32 concurrent updates, want 32", len(r.Entries))
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(tmp) > 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
}

// A record that does not parse is set aside for a human (not lost, not
// fatal): the agent records what it makes next in a new one.
func TestRecordUnreadableIsSetAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir); err == nil {
		t.Fatal("Read of a broken record: no error")
	}
	here := Here()
	if err := Update(dir, func(r *Record) { r.Ensure(here, "/sys/fs/bpf/sluice") }); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path + ".bad"); err != nil || string(b) != "{not json" {
		t.Errorf("the broken record was not kept aside: %q, %v", b, err)
	}
	if r, err := Read(dir); err != nil || r.Find(here, "/sys/fs/bpf/sluice") == nil {
		t.Errorf("after the update: %+v, %v", r, err)
	}
}

// The record is bounded; the entries that go first are the oldest of
// other namespaces, never this one's.
func TestRecordBounded(t *testing.T) {
	dir := t.TempDir()
	here := Here()
	if err := Update(dir, func(r *Record) {
		e := r.Ensure(here, "/sys/fs/bpf/sluice")
		e.Updated = time.Unix(1, 0) // older than every other
		for i := range maxEntries + 10 {
			o := r.Ensure(Scope{Boot: here.Boot, NetNS: fmt.Sprintf("0:%d", i)}, "/p")
			o.Updated = time.Unix(int64(100+i), 0)
		}
	}); err != nil {
		t.Fatal(err)
	}
	r, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Entries) != maxEntries || r.Find(here, "/sys/fs/bpf/sluice") == nil {
		t.Errorf("%d entries (this namespace's kept: %v), want %d with it", len(r.Entries), r.Find(here, "/sys/fs/bpf/sluice") != nil, maxEntries)
	}
	if r.Find(Scope{Boot: here.Boot, NetNS: "0:0"}, "/p") != nil {
		t.Error("the oldest other entry was kept")
	}
}

// Dir follows SLUICE_STATE_DIR (tests), else /var/lib/sluice.
func TestDir(t *testing.T) {
	t.Setenv(DirEnv, "")
	if Dir() != DefaultDir {
		t.Errorf("Dir() = %q, want %q", Dir(), DefaultDir)
	}
	t.Setenv(DirEnv, "/elsewhere")
	if Dir() != "/elsewhere" {
		t.Errorf("Dir() = %q with %s set", Dir(), DirEnv)
	}
}
