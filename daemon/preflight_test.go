package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/internal/netns"
)

// refused is what `sluice run` would exit with and print for err: 78 and
// one line, or not a refusal.
func refused(t *testing.T, err error) (line string, ok bool) {
	t.Helper()
	err = refusal(err)
	if !errors.Is(err, ErrRefused) {
		return "", false
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("a refusal of more than one line: %q", err)
	}
	return err.Error(), true
}

// A metrics_address another process holds, one that is not this host's,
// and a privileged port are refusals naming metrics_address and the fix;
// the holder is named when /proc says who it is. A free address is taken
// and given back.
func TestMetricsAddressRefusals(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	_, err = holdMetricsAddress(addr)
	line, ok := refused(t, err)
	want := fmt.Sprintf("refused (not restarted): metrics_address %s is in use by another process (daemon.test, pid %d): free it or set metrics_address", addr, os.Getpid())
	if !ok || line != want {
		t.Errorf("an address in use: %v\nwant %s", err, want)
	}
	if err := CheckMetricsAddress(addr); !errors.As(err, new(*Refusal)) || !strings.Contains(err.Error(), "is in use by another process (daemon.test") {
		t.Errorf("check-config on an address in use: %v", err)
	}

	// TEST-NET-1 is no address of this host.
	if line, ok := refused(t, CheckMetricsAddress("192.0.2.1:7359")); !ok || !strings.Contains(line, "metrics_address 192.0.2.1:7359 is not an address of this host: set metrics_address") {
		t.Errorf("an address not of this host: %q", line)
	}
	// A port below 1024 without CAP_NET_BIND_SERVICE (the unit grants none).
	eacces := &net.OpError{Op: "listen", Net: "tcp", Err: os.NewSyscallError("bind", syscall.EACCES)}
	if line, ok := refused(t, metricsRefusal("0.0.0.0:80", eacces)); !ok || !strings.Contains(line, "metrics_address 0.0.0.0:80: a port below 1024 needs CAP_NET_BIND_SERVICE") {
		t.Errorf("a privileged port: %q", line)
	}
	// A name that does not resolve may resolve later: not a refusal.
	if _, ok := refused(t, metricsRefusal("nosuch.invalid:7359", &net.DNSError{Err: "no such host", Name: "nosuch.invalid"})); ok {
		t.Error("a failed lookup is refused")
	}

	free := l.Addr().(*net.TCPAddr)
	l.Close()
	held, err := holdMetricsAddress(free.String())
	if err != nil {
		t.Fatalf("a free address: %v", err)
	}
	held.Close()
	if err := CheckMetricsAddress(free.String()); err != nil {
		t.Errorf("check-config on a free address: %v", err)
	}
}

// A socket path the agent cannot create is refused naming socket and the
// unit's directory; the directories a start made for it are listed so a
// failed start removes them; check-config predicts the same without
// creating anything.
func TestSocketRefusals(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o600)
	long := filepath.Join(dir, strings.Repeat("s", 120)+".sock")
	for _, c := range []struct {
		path, want string
	}{
		{filepath.Join(file, "sluice.sock"), "a component of its directory is not a directory (mkdir " + file + ": not a directory): set socket: /run/sluice/sluice.sock"},
		{long, fmt.Sprintf("is %d bytes long; a unix socket path holds at most 107: set socket: /run/sluice/sluice.sock", len(long))},
	} {
		_, _, err := listenStatus(c.path)
		if line, ok := refused(t, err); !ok || !strings.Contains(line, "socket "+c.path) || !strings.Contains(line, c.want) {
			t.Errorf("listen at %s: %v\nwant %q", c.path, err, c.want)
		}
		if line, ok := refused(t, CheckSocketPath(c.path)); !ok || !strings.Contains(line, "socket "+c.path) {
			t.Errorf("check-config at %s: %q", c.path, line)
		}
	}
	// Something that is not a socket is left and refused, as at start.
	if err := CheckSocketPath(file); !errors.Is(err, status.ErrSocketTaken) || !errors.As(err, new(*Refusal)) {
		t.Errorf("check-config over a file: %v", err)
	}

	path := filepath.Join(dir, "a", "b", "sluice.sock")
	if err := CheckSocketPath(path); err != nil {
		t.Errorf("check-config where the agent would create the directories: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Errorf("check-config created a directory: %v", err)
	}
	l, made, err := listenStatus(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, "a", "b"), filepath.Join(dir, "a")}; fmt.Sprint(made) != fmt.Sprint(want) {
		t.Errorf("made %q, want %q", made, want)
	}
	// The live socket is the running agent's: check-config finds no problem.
	if err := CheckSocketPath(path); err != nil {
		t.Errorf("check-config on the live socket: %v", err)
	}
	l.Close()
	removeDirs(made)
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Errorf("the directories made for the socket stay: %v", err)
	}
}

// A read-only directory (what ProtectSystem=strict makes of every one but
// /run/sluice) is refused at start and predicted by check-config.
func TestSocketOnAReadOnlyFileSystem(t *testing.T) {
	netns.RequireRoot(t, "mounts a read-only tmpfs")
	ro := t.TempDir()
	if err := unix.Mount("tmpfs", ro, "tmpfs", unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(ro, 0)
	path := filepath.Join(ro, "sluice.sock")
	_, _, err := listenStatus(path)
	want := "refused (not restarted): socket " + path + " cannot be created: its directory is on a read-only file system (bind: read-only file system): " +
		"set socket: /run/sluice/sluice.sock (the unit's RuntimeDirectory; its ProtectSystem=strict leaves the other directories read-only) or a path in a writable directory"
	if line, ok := refused(t, err); !ok || line != want {
		t.Errorf("listen on a read-only file system: %v\nwant %s", err, want)
	}
	if line, ok := refused(t, CheckSocketPath(filepath.Join(ro, "run", "sluice.sock"))); !ok || !strings.Contains(line, "its directory is on a read-only file system (access "+ro+": read-only file system)") {
		t.Errorf("check-config on a read-only file system: %q", line)
	}
}

// The verifier's rejection and a kernel feature missing are refusals in
// one line, naming the kernel and the fix; other load failures are not.
func TestLoadRefusals(t *testing.T) {
	verr := &ebpf.VerifierError{Cause: syscall.EACCES, Log: []string{"0: R1=ctx() R10=fp0", "23: (0f) r6 += r9",
		"R6 has pointer with unsupported alu operation, pointer arithmetic with it prohibited for !root", "processed 23 insns (limit 1000000)"}}
	line, ok := refused(t, loadRefusal(fmt.Errorf("program sluice_ingress: %w", verr), "6.18.44"))
	for _, want := range []string{"refused (not restarted): the kernel's verifier (Linux 6.18.44) rejects sluice's BPF programs: program sluice_ingress: ",
		"pointer arithmetic with it prohibited for !root", "give the agent CAP_BPF and CAP_PERFMON", "sluice check-config prints the verifier's log"} {
		if !ok || !strings.Contains(line, want) {
			t.Errorf("a verifier rejection: %q lacks %q", line, want)
		}
	}
	missing := fmt.Errorf("map sample_rings: map create: %w", ebpf.ErrNotSupported)
	if line, ok := refused(t, loadRefusal(missing, "5.10.0")); !ok || !strings.Contains(line, "this kernel (Linux 5.10.0) lacks a BPF feature sluice needs: map sample_rings") ||
		!strings.Contains(line, "run a kernel sluice supports (Linux 5.18 or later)") {
		t.Errorf("a missing feature: %q", line)
	}
	// Anywhere on the start path, a feature missing is the kernel's.
	if _, ok := refused(t, startRefusal(fmt.Errorf("build shaper: %w", ebpf.ErrNotSupported))); !ok {
		t.Error("a missing feature while starting is not refused")
	}
	for _, err := range []error{loadRefusal(syscall.ENOMEM, "6.18"), startRefusal(errors.New("bootstrap: dial"))} {
		if _, ok := refused(t, err); ok {
			t.Errorf("%v is refused", err)
		}
	}
}
