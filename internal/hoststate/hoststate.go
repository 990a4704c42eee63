// Package hoststate is sluice's record, in its own state directory
// (/var/lib/sluice), of where it pinned and what it made on the host: the
// pin directory, the interfaces it attached to, the IFB devices and clsact
// qdiscs it created. The pins carry their own record (maps.Owned), but only
// someone who knows the pin directory can read it, and that comes from the
// configuration: a package removed after the configuration was deleted,
// broken, or pointed at a custom pin_path would leave programs attached.
// This record needs no configuration, so `sluice unload` (the packages'
// prerm and preun) finds everything whatever state the file is in.
//
// The record is one small JSON file, replaced atomically (a temporary file,
// fsync, rename, fsync of the directory) under a flock on the directory,
// so agents in other network namespaces and `sluice unload` never lose
// each other's entries. Entries are keyed by the boot, the network
// namespace and the pin directory: interface indexes mean something only in
// their namespace, and nothing sluice makes outlives a reboot (bpffs and
// devices are memory), so entries of an earlier boot are dropped.
//
// It imports nothing of sluice: what the entries name is removed by
// daemon, which validates each device (index and name) before
// touching it.
package hoststate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultDir is where the record lives: the unit's StateDirectory=sluice,
// writable under ProtectSystem=strict.
const DefaultDir = "/var/lib/sluice"

// DirEnv overrides DefaultDir. It exists for tests, which run agents in
// namespaces of their own and must not write the host's record; an
// operator has no reason to set it (unload would then look elsewhere than
// the agent wrote).
const DirEnv = "SLUICE_STATE_DIR"

// FileName is the record's file in the state directory.
const FileName = "host.json"

// schemaVersion is the record's format. A newer sluice's record is read
// for the fields this one knows; rewriting it drops the others.
const schemaVersion = 1

// maxEntries bounds the record: test suites start agents in many short-
// lived namespaces, whose entries would otherwise pile up until the next
// boot. The oldest entries of other namespaces go first.
const maxEntries = 64

// Dir is the state directory: $SLUICE_STATE_DIR, else DefaultDir.
func Dir() string {
	if d := os.Getenv(DirEnv); d != "" {
		return d
	}
	return DefaultDir
}

// Device is a network device as sluice saw it: its index, and its name
// then (an index the kernel gives to a new device is not the one recorded).
type Device struct {
	Index int    `json:"ifindex"`
	Name  string `json:"name"`
}

// Scope says where an entry's objects live: the boot and the network
// namespace (device and inode of its nsfs file) of the agent that wrote it.
type Scope struct {
	Boot  string `json:"boot_id"`
	NetNS string `json:"netns"`
}

// Here is the scope of the calling process. Either part may be empty when
// /proc does not say; such an entry then matches only an equally blind
// reader.
func Here() Scope {
	var s Scope
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		s.Boot = strings.TrimSpace(string(b))
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err == nil {
		s.NetNS = fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	}
	return s
}

// Entry is what one agent (one pin directory in one namespace) made.
type Entry struct {
	Scope
	PinPath string `json:"pin_path"`
	// Interfaces the agent attached its programs to (and shaped).
	Interfaces []Device `json:"interfaces,omitempty"`
	// IFBs and Clsact: the IFB devices and the clsact qdiscs it created, as
	// its pinned record (maps.Owned) names them.
	IFBs    []Device  `json:"ifbs,omitempty"`
	Clsact  []Device  `json:"clsact,omitempty"`
	Updated time.Time `json:"updated"`
}

// AddInterface notes an interface the agent attaches to (once).
func (e *Entry) AddInterface(index int, name string) {
	d := Device{index, name}
	if !slices.Contains(e.Interfaces, d) {
		e.Interfaces = append(e.Interfaces, d)
	}
}

// Devices turns an index → name map (maps.Owned's) into a sorted list.
func Devices(m map[int]string) []Device {
	out := make([]Device, 0, len(m))
	for idx, name := range m {
		out = append(out, Device{idx, name})
	}
	slices.SortFunc(out, func(a, b Device) int { return a.Index - b.Index })
	if len(out) == 0 {
		return nil
	}
	return out
}

// Record is the state directory's record.
type Record struct {
	Version int     `json:"version"`
	Entries []Entry `json:"entries"`
}

// Find is the entry of pinPath in scope s, nil if none.
func (r *Record) Find(s Scope, pinPath string) *Entry {
	for i := range r.Entries {
		if r.Entries[i].Scope == s && r.Entries[i].PinPath == pinPath {
			return &r.Entries[i]
		}
	}
	return nil
}

// Ensure is the entry of pinPath in scope s, added if there is none.
func (r *Record) Ensure(s Scope, pinPath string) *Entry {
	if e := r.Find(s, pinPath); e != nil {
		return e
	}
	r.Entries = append(r.Entries, Entry{Scope: s, PinPath: pinPath})
	return &r.Entries[len(r.Entries)-1]
}

// Forget removes the entry of pinPath in scope s, saying whether there was
// one.
func (r *Record) Forget(s Scope, pinPath string) bool {
	n := len(r.Entries)
	r.Entries = slices.DeleteFunc(r.Entries, func(e Entry) bool { return e.Scope == s && e.PinPath == pinPath })
	return len(r.Entries) < n
}

// In lists the entries of scope s, and how many other entries there are
// (agents in other network namespaces: out of this process's reach).
func (r *Record) In(s Scope) (mine []Entry, others int) {
	for _, e := range r.Entries {
		if e.Scope == s {
			mine = append(mine, e)
		} else {
			others++
		}
	}
	return mine, others
}

// Read reads the record in dir. No record (no directory, no file) is an
// empty one; a file that does not parse is an error.
func Read(dir string) (Record, error) {
	data, err := os.ReadFile(filepath.Join(dir, FileName))
	if errors.Is(err, os.ErrNotExist) {
		return Record{Version: schemaVersion}, nil
	}
	if err != nil {
		return Record{}, fmt.Errorf("read the host record: %w", err)
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return Record{}, fmt.Errorf("read the host record %s: %w", filepath.Join(dir, FileName), err)
	}
	return r, nil
}

// Update changes the record in dir under its lock: f sees the record as it
// is on disk (without entries of an earlier boot), and what it leaves is
// written back atomically, or the file is removed once no entry is left.
// The directory is made (0700) if missing. A record that does not parse is
// kept aside as host.json.bad, for a human, and f starts from an empty one:
// an agent must be able to record what it makes next.
func Update(dir string, f func(*Record)) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("host record: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("host record: %w", err)
	}
	defer d.Close()
	// The lock is the directory's own: a lock file would stay behind, and
	// the directory would never be empty for the package's removal.
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("host record: lock %s: %w", dir, err)
	}
	defer unix.Flock(int(d.Fd()), unix.LOCK_UN)
	path := filepath.Join(dir, FileName)
	r, err := Read(dir)
	if err != nil {
		if rerr := os.Rename(path, path+".bad"); rerr != nil {
			return fmt.Errorf("%w (and it could not be set aside: %w)", err, rerr)
		}
		r = Record{}
	}
	here := Here()
	r.prune(here)
	f(&r)
	r.bound(here)
	if len(r.Entries) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("host record: %w", err)
		}
		return syncDir(d)
	}
	r.Version = schemaVersion // what is written is this release's format
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("host record: %w", err)
	}
	return writeAtomic(d, path, append(data, '\n'))
}

// prune drops entries of another boot: bpffs pins, devices and qdiscs do
// not survive a reboot, and interface indexes are handed out anew.
func (r *Record) prune(here Scope) {
	if here.Boot == "" {
		return
	}
	r.Entries = slices.DeleteFunc(r.Entries, func(e Entry) bool { return e.Boot != "" && e.Boot != here.Boot })
}

// bound keeps at most maxEntries, dropping first the oldest entries of
// other namespaces, whose agents (tests, mostly) this host's unload
// cannot reach anyway.
func (r *Record) bound(here Scope) {
	if len(r.Entries) <= maxEntries {
		return
	}
	slices.SortStableFunc(r.Entries, func(a, b Entry) int {
		if (a.Scope == here) != (b.Scope == here) {
			if a.Scope == here {
				return 1
			}
			return -1
		}
		return a.Updated.Compare(b.Updated)
	})
	r.Entries = slices.Clone(r.Entries[len(r.Entries)-maxEntries:])
}

// writeAtomic replaces path (in the directory d) with data: readers see
// the old record or the new one, never a part, even across a crash.
func writeAtomic(d *os.File, path string, data []byte) error {
	if err := replaceFile(d, path, data); err != nil {
		return fmt.Errorf("host record: %w", err)
	}
	return nil
}

// WriteFile replaces path, a file in the state directory other than the
// record, with data the way the record is written: readers see the old
// file or the new one, never a part, even across a crash.
func WriteFile(path string, data []byte) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return replaceFile(d, path, data)
}

func replaceFile(d *os.File, path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", d.Name(), err)
	}
	return nil
}

func syncDir(d *os.File) error {
	if err := d.Sync(); err != nil {
		return fmt.Errorf("host record: sync %s: %w", d.Name(), err)
	}
	return nil
}

// String is the entry for a person: where its pins are and what it names.
func (e Entry) String() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "pin_path %s", e.PinPath)
	for _, part := range []struct {
		what string
		devs []Device
	}{{"interfaces", e.Interfaces}, {"IFBs", e.IFBs}, {"clsact qdiscs on", e.Clsact}} {
		if len(part.devs) == 0 {
			continue
		}
		names := make([]string, len(part.devs))
		for i, d := range part.devs {
			names[i] = d.Name
		}
		fmt.Fprintf(&b, ", %s %s", part.what, strings.Join(names, " "))
	}
	return b.String()
}
