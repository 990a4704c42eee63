package maps

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// The pin directory: what sluice keeps in a bpffs between agents (the
// maps of pinnedMaps, the programs' links), and the rules that keep it
// from touching anything else on the host. pin_path must name a directory
// of its own inside a mounted bpffs; sluice mounts a bpffs only on an empty
// directory, and removes only the pins it names.

// LinkPinName is the pin of the link attaching a program (ingress or
// egress) to an interface.
func LinkPinName(ifindex int, hook string) string { return fmt.Sprintf("link_%d_%s", ifindex, hook) }

// ErrPinPath: pin_path is not a directory sluice may use (outside a
// bpffs, a symlink, not a directory, or a non-empty directory to mount on).
var ErrPinPath = errors.New("pin_path refused")

// InterfaceOfLinkPin is the interface index a link pin (LinkPinName)
// names.
func InterfaceOfLinkPin(name string) (int, bool) {
	m := linkPin.FindStringSubmatch(filepath.Base(name))
	if m == nil {
		return 0, false
	}
	idx, err := strconv.Atoi(m[1])
	return idx, err == nil
}

var (
	linkPin       = regexp.MustCompile(`^link_([0-9]+)_(ingress|egress)$`)
	halfBuiltName = regexp.MustCompile(`-(tmp|old)-[0-9]+$`)
)

// ownPin reports whether name is a pin sluice makes in its directory.
func ownPin(name string) bool {
	return slices.Contains(pinnedMaps, name) || slices.Contains(retiredPins, name) || linkPin.MatchString(name) ||
		name == OwnedRecordPin || name == DirMarkerPin
}

// checkPinDir refuses a pin directory that is not sluice's to use: its
// parent must be a bpffs, and the directory, if it exists, a real
// directory (not a symlink, which could lead into another bpffs or
// anywhere) on that same bpffs.
func checkPinDir(dir string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || dir == "/" {
		return fmt.Errorf("%w: %q must be a clean absolute path below a bpffs mount (default /sys/fs/bpf/sluice)", ErrPinPath, dir)
	}
	if err := requireBPFFS(filepath.Dir(dir)); err != nil {
		return err
	}
	st, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("pin_path %s: %w", dir, err)
	case st.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symlink: name the directory itself, inside a bpffs", ErrPinPath, dir)
	case !st.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrPinPath, dir)
	}
	return requireBPFFS(dir)
}

// CheckPinPath says whether `sluice run` would accept pin_path on this
// host: a bpffs parent (or an empty directory to mount one on) and, if the
// directory exists, a real directory inside it (check-config's prediction).
func CheckPinPath(dir string) error {
	parent := filepath.Dir(dir)
	var st unix.Statfs_t
	if unix.Statfs(parent, &st) == nil && st.Type == unix.BPF_FS_MAGIC {
		if err := checkPinDir(dir); err != nil {
			return err
		}
		return checkOwned(dir)
	}
	if empty, err := emptyDir(parent); err == nil && !empty {
		return fmt.Errorf("%w: %s is not a bpffs and not empty: sluice mounts a bpffs only on an empty directory", ErrPinPath, parent)
	}
	return nil // absent or empty: sluice run mounts a bpffs there
}

// requireBPFFS checks that dir is on a bpf filesystem.
func requireBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("pin directory parent %s: %w", dir, err)
	}
	if st.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("%w: %s is not a bpf filesystem (mount -t bpf bpf %s)", ErrPinPath, dir, dir)
	}
	return nil
}

// MountBPFFS makes dir a bpffs: nothing to do when it is one already;
// otherwise a bpffs is mounted on it only if it is an empty directory (or
// absent, and created): mounting over anything else would hide what it
// holds (pin_path: /sluice would mount over /).
func MountBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	empty, err := emptyDir(dir)
	if err != nil {
		return fmt.Errorf("mount bpffs at %s: %w", dir, err)
	}
	if !empty {
		return fmt.Errorf("%w: %s is not a bpffs and not empty: sluice mounts a bpffs only on an empty directory; set pin_path to a directory inside a mounted bpffs (default /sys/fs/bpf/sluice)", ErrPinPath, dir)
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs at %s: %w", dir, err)
	}
	return nil
}

func emptyDir(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return false, err
}

// UnpinReport is what Unpin removed, and what it found and left.
type UnpinReport struct {
	Removed []string // pins and directories removed
	Foreign []string // entries sluice does not make, left in place
}

// Unpin removes a pin directory left by an agent (`sluice unload`): the
// pins sluice makes, the directory itself if then empty, and the
// half-built directories (<dir>-tmp-<pid>) of a load that died. It refuses
// a directory a running agent holds (ErrPinDirBusy) and anything outside a
// bpffs; entries it does not make are left and reported. Pins named in keep
// stay, and with them the directory (`sluice unload` keeps the record of
// what sluice made, OwnedRecordPin, until everything it names is gone).
func Unpin(dir string, keep ...string) (UnpinReport, error) {
	var rep UnpinReport
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || dir == "/" {
		return rep, fmt.Errorf("unpin %q: not a clean absolute path", dir)
	}
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) && len(halfBuilt(dir)) == 0 {
		return rep, nil // nothing pinned
	}
	if err := checkPinDir(dir); err != nil {
		return rep, fmt.Errorf("unpin: %w", err)
	}
	for _, tmp := range halfBuilt(dir) {
		if err := unpinDir(tmp, &rep, nil); err != nil {
			return rep, err
		}
	}
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return rep, nil
	}
	if err := checkOwned(dir); err != nil {
		return rep, fmt.Errorf("unpin, nothing removed: %w", err)
	}
	return rep, unpinDir(dir, &rep, keep)
}

// halfBuilt lists the temporary directories a load pins into before
// renaming (Load), left by a load that died.
func halfBuilt(dir string) []string {
	tmp, _ := filepath.Glob(dir + "-tmp-*")
	old, _ := filepath.Glob(dir + "-old-*") // a migration's (migrate.go)
	matches := append(tmp, old...)
	var out []string
	for _, m := range matches {
		if st, err := os.Lstat(m); err == nil && st.IsDir() && halfBuiltName.MatchString(m) {
			out = append(out, m)
		}
	}
	return out
}

// removePin removes one of sluice's pins (a map's, or the directory's
// mark): the one place a pin is deleted. Gone already is no error.
func removePin(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// removeOwnPinTree removes a pin directory sluice made and no agent uses:
// the temporary one a load or migration builds before the rename that
// puts it in place, or the old one a migration set aside. Never the
// directory in place (Unpin's, which spares what is not sluice's).
func removeOwnPinTree(dir string) {
	os.RemoveAll(dir) // best effort: the pins' maps live on while programs hold them
}

func unpinDir(dir string, rep *UnpinReport, keep []string) error {
	lock, err := lockDir(dir)
	if err != nil {
		return fmt.Errorf("unpin %s: %w (stop the agent first)", dir, err)
	}
	defer lock.Close()
	names, err := lock.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("unpin %s: %w", dir, err)
	}
	slices.Sort(names)
	foreign := 0
	for _, name := range names {
		path := filepath.Join(dir, name)
		if slices.Contains(keep, name) {
			foreign++ // kept: the directory stays with it
			continue
		}
		if name == DirMarkerPin {
			continue // the mark goes last, with the directory
		}
		if !ownPin(name) {
			rep.Foreign = append(rep.Foreign, path)
			foreign++
			continue
		}
		if err := removePin(path); err != nil {
			return fmt.Errorf("unpin %s: %w", path, err)
		}
		rep.Removed = append(rep.Removed, path)
	}
	if foreign > 0 {
		return nil // not empty: the directory stays with what is not sluice's, and the mark with it
	}
	if err := removePin(filepath.Join(dir, DirMarkerPin)); err != nil {
		return fmt.Errorf("unpin %s: %w", dir, err)
	}
	if err := removePin(dir); err != nil {
		return fmt.Errorf("unpin %s: %w", dir, err)
	}
	rep.Removed = append(rep.Removed, dir)
	return nil
}
