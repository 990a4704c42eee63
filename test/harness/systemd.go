package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Systemd is this machine's own systemd booted as PID 1 of a new PID +
// mount namespace that shares a network namespace (a broker host's): the
// installed unit's agent then attaches to that namespace's interfaces, as
// it would on a broker. Its view of the files differs from the host's only
// by fresh tmpfs over systemdOverlays, mounted before systemd starts: its
// tmpfiles setup empties /tmp, and a mount namespace does not protect
// files (FIELD-NOTES.md), and `make install` inside writes only there.
// Close kills it (and everything in its PID namespace) and says whether the
// host's /tmp came through.
type Systemd struct {
	// PID is systemd's process id in the host's PID namespace.
	PID    int
	cmd    *exec.Cmd
	done   chan struct{}
	log    string
	made   []string // overlay mount points this boot created on the host
	canary string   // a file in the host's /tmp that must outlive the boot
}

// systemdOverlays are covered by a tmpfs inside: what systemd empties or
// writes at boot (/tmp, /var/tmp, /run, its state and journal) and what
// `make install` and the unit write (the binary, the unit, the
// configuration, man pages and docs, the agent's StateDirectory).
var systemdOverlays = []string{"/tmp", "/var/tmp", "/run", "/etc/systemd/system", "/var/log/journal", "/var/lib/systemd",
	"/var/lib/sluice", "/usr/local/bin", "/usr/local/share", "/etc/sluice", "/usr/share/doc"}

// bootScript mounts the overlays and an empty bpffs (what PID 1 does at
// boot on a systemd host; this machine's init does not) and becomes
// systemd. It runs as PID 1 of the new namespaces.
const bootScript = `set -e
for d in "$@"; do mount -t tmpfs tmpfs "$d"; done
ip link set lo up
mount -t bpf -o mode=0700 bpf /sys/fs/bpf
exec /lib/systemd/systemd --system --unit=basic.target
`

// BootSystemd boots systemd in the network namespace at netnsPath (a
// named namespace's /run/netns/<name>) and waits until it is up (systemctl
// is-system-running --wait), at most 60 s. dir keeps its console log.
func BootSystemd(netnsPath, dir string) (*Systemd, error) {
	s := &Systemd{done: make(chan struct{}), log: filepath.Join(dir, "systemd-console.log")}
	canary, err := os.CreateTemp("/tmp", "sluice-systemd-canary-")
	if err != nil {
		return nil, err
	}
	canary.Close()
	s.canary = canary.Name()
	// A tmpfs needs its mount point: one missing here is made (and
	// removed by Close), never written through.
	for _, d := range systemdOverlays {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			if err := os.Mkdir(d, 0o700); err != nil {
				s.Close()
				return nil, err
			}
			s.made = append(s.made, d)
		}
	}
	logf, err := os.Create(s.log)
	if err != nil {
		s.Close()
		return nil, err
	}
	defer logf.Close()
	// nsenter joins the network namespace and execs unshare (same pid),
	// whose forked child is PID 1 of the new PID namespace; --kill-child
	// takes that child down if unshare dies first.
	args := append([]string{"--net=" + netnsPath, "unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc",
		"--propagation", "private", "bash", "-c", bootScript, "boot"}, systemdOverlays...)
	s.cmd = exec.Command("nsenter", args...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := s.cmd.Start(); err != nil {
		s.Close()
		return nil, err
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for s.PID == 0 {
		if pid := systemdChild(s.cmd.Process.Pid); pid != 0 {
			s.PID = pid
			break
		}
		if err := s.bootFailed(deadline); err != nil {
			return nil, err
		}
		time.Sleep(100 * time.Millisecond) // polling /proc for the exec, bounded by the deadline
	}
	for {
		// "degraded" (a unit of the host's failed in here) is up too: the
		// test judges its own unit.
		out, _ := s.Command("systemctl", "is-system-running", "--wait").Output()
		if state := strings.TrimSpace(string(out)); state == "running" || state == "degraded" {
			return s, nil
		}
		if err := s.bootFailed(deadline); err != nil {
			return nil, err
		}
		time.Sleep(200 * time.Millisecond) // is-system-running answers at once before the bus is up; bounded by the deadline
	}
}

// systemdChild is the pid of unshare's child once it has become systemd
// (0 before).
func systemdChild(unshare int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", unshare, unshare))
	if err != nil {
		return 0
	}
	for _, f := range strings.Fields(string(data)) {
		pid, _ := strconv.Atoi(f)
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "systemd" {
			return pid
		}
	}
	return 0
}

// bootFailed tears down and says why once the boot has ended or run past
// the deadline (nil while it may still come up).
func (s *Systemd) bootFailed(deadline time.Time) error {
	select {
	case <-s.done:
	default:
		if time.Now().Before(deadline) {
			return nil
		}
	}
	s.Close()
	data, _ := os.ReadFile(s.log)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return fmt.Errorf("systemd did not come up within 60 s in its namespace:\n%s", data)
}

// Command is argv run inside systemd's namespaces (mount, PID, network),
// where systemctl and journalctl reach it.
func (s *Systemd) Command(argv ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"-t", strconv.Itoa(s.PID), "-m", "-p", "-n"}, argv...)...)
}

// Run runs argv inside and returns its output (stdout and stderr); an
// error carries the output.
func (s *Systemd) Run(argv ...string) (string, error) {
	out, err := s.Command(argv...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out), nil
}

// Show is one property of a unit (systemctl show -p NAME --value).
func (s *Systemd) Show(unit, property string) (string, error) {
	out, err := s.Run("systemctl", "show", "-p", property, "--value", unit)
	return strings.TrimSpace(out), err
}

// Path is where the host reaches path as systemd's namespace sees it
// (through /proc/PID/root): a file in one of the overlays, a socket in
// /run.
func (s *Systemd) Path(path string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", s.PID), path)
}

// Close kills systemd (PID 1 of its namespace: every process in it goes
// too, and its mounts with them), removes the mount points it made and
// fails if the host's /tmp lost its canary. Safe to call twice.
func (s *Systemd) Close() error {
	var errs []error
	if s.cmd != nil && s.cmd.Process != nil {
		if s.PID != 0 {
			syscall.Kill(s.PID, syscall.SIGKILL)
		}
		s.cmd.Process.Kill() // unshare: --kill-child covers a systemd not yet found
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			errs = append(errs, fmt.Errorf("systemd's namespace (unshare pid %d) did not end within 30 s", s.cmd.Process.Pid))
		}
		s.cmd = nil
	}
	for _, d := range s.made {
		os.Remove(d)
	}
	s.made = nil
	if s.canary != "" {
		if _, err := os.Stat(s.canary); err != nil {
			errs = append(errs, fmt.Errorf("the host's /tmp was emptied while systemd ran: %v", err))
		}
		os.Remove(s.canary)
		s.canary = ""
	}
	return errors.Join(errs...)
}
