package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/maps"
)

// Refusal is a start failure that restarting cannot fix, found on the host
// (not in the file): a metrics_address taken or not this host's, a socket
// path the agent cannot create, programs the kernel's verifier rejects, a
// kernel feature missing. Reason names the cause and the fix in one line;
// `sluice run` exits ExitRefused with it (refusal adds ErrRefused), and
// check-config lists it as a problem of this host.
type Refusal struct {
	Reason string
	Err    error // what the kernel or the system said, when anything
}

func (r *Refusal) Error() string { return r.Reason }
func (r *Refusal) Unwrap() error { return r.Err }

// SupportedKernels is what a refusal over the kernel tells the operator to run.
const SupportedKernels = "Linux 5.18 or later"

// holdMetricsAddress listens on addr before anything is attached, so that
// a start that could not serve metrics is refused with the host as it was
// found; the metrics listener's first Open closes it and listens again (Go
// listeners set SO_REUSEADDR, so the port is free at once).
func holdMetricsAddress(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		if r := metricsRefusal(addr, err); r != err {
			return nil, r
		}
		return nil, fmt.Errorf("metrics_address: %w", err)
	}
	return l, nil
}

// CheckMetricsAddress is check-config's prediction for metrics_address: it
// listens on addr and closes at once. A port held by a running sluice agent
// (the one a reload would reach) is no problem; every other failure a
// restart cannot fix is a *Refusal.
func CheckMetricsAddress(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err == nil {
		return l.Close()
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		if comm, _ := portHolder(addr); comm == "sluice" {
			return nil
		}
	}
	if r := metricsRefusal(addr, err); r != err {
		return r
	}
	return fmt.Errorf("metrics_address: %w", err)
}

// metricsRefusal says why the metrics listener could not open on addr
// when a restart cannot fix it (a *Refusal); other errors are returned
// as they are.
func metricsRefusal(addr string, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		by := "another process"
		if comm, pid := portHolder(addr); comm != "" {
			by = fmt.Sprintf("another process (%s, pid %d)", comm, pid)
		}
		return &Refusal{Reason: fmt.Sprintf("metrics_address %s is in use by %s: free it or set metrics_address", addr, by), Err: err}
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return &Refusal{Reason: fmt.Sprintf("metrics_address %s is not an address of this host: set metrics_address to one of its addresses (default 127.0.0.1:%s)",
			addr, config.DefaultMetricsPort), Err: err}
	case errors.Is(err, syscall.EACCES):
		why := "the system denies listening there"
		if _, p, perr := net.SplitHostPort(addr); perr == nil {
			if port, perr := strconv.Atoi(p); perr == nil && port < 1024 {
				why = "a port below 1024 needs CAP_NET_BIND_SERVICE, which the unit does not grant"
			}
		}
		return &Refusal{Reason: fmt.Sprintf("metrics_address %s: %s: set metrics_address to a port from 1024 (default %s)", addr, why, config.DefaultMetricsPort), Err: err}
	}
	return err
}

// maxSocketPath is the longest path a unix socket can be bound to
// (sun_path holds 108 bytes with the terminating NUL).
const maxSocketPath = 107

// runtimeSocket is the socket under the unit's RuntimeDirectory, the one
// directory outside the bpffs and the state directory that its
// ProtectSystem=strict leaves writable.
const runtimeSocket = "/run/sluice/sluice.sock"

// socketFix is the fix every refused socket path shares.
const socketFix = "set socket: " + runtimeSocket + " (the unit's RuntimeDirectory; its ProtectSystem=strict leaves the other directories read-only) or a path in a writable directory"

// listenStatus opens the status socket before anything is attached. made
// are the directories it created for it, deepest first, for a failed
// start to remove. A path the agent cannot create is a *Refusal.
func listenStatus(path string) (l net.Listener, made []string, err error) {
	if len(path) > maxSocketPath {
		return nil, nil, socketTooLong(path)
	}
	made = missingDirs(filepath.Dir(path))
	l, err = status.Listen(path)
	if err != nil {
		removeDirs(made)
		return nil, nil, socketRefusal(path, err)
	}
	return l, made, nil
}

// CheckSocketPath is check-config's prediction for socket: the path fits a
// unix socket, nothing but a socket is there, and its directory (or the
// nearest one that exists, where the agent would create the rest) is
// writable. A live socket there is the running agent's (a reload reaches
// it): no problem. It creates nothing.
func CheckSocketPath(path string) error {
	if len(path) > maxSocketPath {
		return socketTooLong(path)
	}
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSocket == 0 {
		return &Refusal{Reason: fmt.Sprintf("socket %s: something that is not a socket is there (%v); sluice replaces only a stale socket of its own: remove it or %s",
			path, st.Mode().Type(), socketFix), Err: status.ErrSocketTaken}
	}
	dir := filepath.Dir(path)
	for {
		st, err := os.Stat(dir)
		if errors.Is(err, os.ErrNotExist) && dir != "/" {
			dir = filepath.Dir(dir)
			continue
		}
		if err != nil {
			return socketRefusal(path, err)
		}
		if !st.IsDir() {
			return socketRefusal(path, &os.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR})
		}
		break
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return socketRefusal(path, &os.PathError{Op: "access", Path: dir, Err: err})
	}
	return nil
}

func socketTooLong(path string) error {
	return &Refusal{Reason: fmt.Sprintf("socket %s is %d bytes long; a unix socket path holds at most %d: %s", path, len(path), maxSocketPath, socketFix)}
}

// socketRefusal says why the status socket cannot be made at path. Only
// causes a restart cannot fix are a *Refusal (a live socket of another
// process is status.ErrSocketTaken, refused as such).
func socketRefusal(path string, err error) error {
	if errors.Is(err, status.ErrSocketTaken) {
		return err
	}
	for _, e := range []struct {
		errno syscall.Errno
		why   string
	}{
		{syscall.EROFS, "its directory is on a read-only file system"},
		{syscall.EACCES, "its directory is not writable"},
		{syscall.EPERM, "its directory is not writable"},
		{syscall.ENOTDIR, "a component of its directory is not a directory"},
		{syscall.ENAMETOOLONG, "the path is too long"},
	} {
		if errors.Is(err, e.errno) {
			return &Refusal{Reason: fmt.Sprintf("socket %s cannot be created: %s (%s: %v): %s", path, e.why, failedStep(err), e.errno, socketFix), Err: err}
		}
	}
	return err
}

// failedStep names the system call that failed and its path, when err
// says ("mkdir /etc/sluice/run", "bind").
func failedStep(err error) string {
	var pe *os.PathError
	var se *os.SyscallError
	switch {
	case errors.As(err, &pe):
		return pe.Op + " " + pe.Path
	case errors.As(err, &se):
		return se.Syscall
	}
	return "create"
}

// missingDirs lists dir and those of its parents that do not exist,
// deepest first.
func missingDirs(dir string) []string {
	var missing []string
	for ; dir != "/" && dir != "."; dir = filepath.Dir(dir) {
		if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
			break
		}
		missing = append(missing, dir)
	}
	return missing
}

// removeDirs removes the directories a failed start created, deepest
// first, each only if it is empty.
func removeDirs(dirs []string) {
	for _, d := range dirs {
		os.Remove(d)
	}
}

// VerifyDataPath loads the data path sized by cfg through the kernel's
// verifier, without pins, and unloads it: check-config's dry run, and the
// daemon's diagnosis of a load that failed (maps.Load flattens the
// verifier's error into text). It returns how many programs and maps
// loaded. A rejection by the verifier or a kernel feature missing is a
// *Refusal; other failures are returned as they are.
func VerifyDataPath(cfg config.Config) (programs, nmaps int, err error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return 0, 0, fmt.Errorf("raise memlock limit: %w", err)
	}
	spec, err := maps.Spec(DataPathOptions(cfg))
	if err != nil {
		return 0, 0, err
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return 0, 0, loadRefusal(err, kernelRelease())
	}
	defer coll.Close()
	return len(coll.Programs), len(coll.Maps), nil
}

// loadRefusal classifies a failure to load the data path: the verifier's
// rejection and a missing kernel feature are refusals naming the kernel.
func loadRefusal(err error, kernel string) error {
	var verr *ebpf.VerifierError
	switch {
	case errors.As(err, &verr):
		return &Refusal{Reason: fmt.Sprintf("the kernel's verifier (Linux %s) rejects sluice's BPF programs: %v: "+
			"give the agent CAP_BPF and CAP_PERFMON (the unit grants both) and run a kernel sluice supports (%s); sluice check-config prints the verifier's log",
			kernel, err, SupportedKernels), Err: err}
	case errors.Is(err, ebpf.ErrNotSupported):
		return &Refusal{Reason: fmt.Sprintf("this kernel (Linux %s) lacks a BPF feature sluice needs: %v: run a kernel sluice supports (%s); sluice check-config names each feature missing",
			kernel, err, SupportedKernels), Err: err}
	}
	return err
}

// startRefusal marks what the start path (until the first cycle runs)
// failed with when it is the kernel's lack of a feature: a restart runs on
// the same kernel.
func startRefusal(err error) error {
	var r *Refusal
	if err == nil || errors.Is(err, ErrRefused) || errors.As(err, &r) || !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	return loadRefusal(err, kernelRelease())
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}
