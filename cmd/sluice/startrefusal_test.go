package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/daemon"
	"github.com/sluice-dev/sluice/internal/hoststate"
	"github.com/sluice-dev/sluice/internal/netns"
	"github.com/sluice-dev/sluice/maps"
)

// asMainEnv makes this test binary run as sluice itself (main, with its
// exit status), for tests that need a process of its own: one in a
// network namespace, or with fewer capabilities.
const asMainEnv = "SLUICE_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		main() // exits
	}
	// The agents and unloads these tests run record what they make in a
	// directory of the tests' own, never in the host's /var/lib/sluice
	// (processes started as main inherit it).
	state, err := os.MkdirTemp("", "sluice-state-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(hoststate.DirEnv, state)
	code := m.Run()
	os.RemoveAll(state)
	os.Exit(code)
}

// dropPerfmon runs a command with CAP_BPF and CAP_NET_ADMIN but neither
// CAP_PERFMON nor CAP_SYS_ADMIN: the verifier then rejects the programs'
// packet pointer arithmetic, a real rejection on any kernel.
var dropPerfmon = []string{"setpriv", "--bounding-set=-all,+bpf,+net_admin", "--inh-caps=-all,+bpf,+net_admin"}

// Every start failure a restart cannot fix exits 78 (the unit's
// RestartPreventExitStatus, so no crash loop) with one line naming the
// cause and the fix, and leaves the namespace's qdiscs, filters, TCX
// programs, devices and pins exactly as they were: a metrics_address in
// use, a socket where none can be made (as /etc under the unit's
// ProtectSystem=strict), programs the verifier rejects. The same file with
// the cause removed starts, attaches and detaches; check-config, run while
// that agent holds the port and socket, finds nothing wrong, and it names
// each cause otherwise, in the same words.
func TestRunRefusesWhatARestartCannotFix(t *testing.T) {
	netns.RequireRoot(t, "runs the agent in a namespace, loads BPF programs, mounts a bpffs and a read-only tmpfs")
	setpriv, err := exec.LookPath(dropPerfmon[0])
	if err != nil {
		t.Fatalf("this test drops CAP_PERFMON with setpriv (util-linux): %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Named sluice, as the agent's process is on a host (check-config tells
	// a port held by a running agent by that name).
	bin := filepath.Join(t.TempDir(), "sluice")
	if err := os.Symlink(self, bin); err != nil {
		t.Fatal(err)
	}
	pair, idx, fs := brokerWithBPFFS(t)
	ro := t.TempDir()
	if err := unix.Mount("tmpfs", ro, "tmpfs", unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(ro, 0)

	var port int
	if err := pair.Broker.Do(func() error {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			port = l.Addr().(*net.TCPAddr).Port
			l.Close()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", port)
	dir := t.TempDir()
	socket := filepath.Join(dir, "run", "sluice.sock")
	write := func(name, socket string) string {
		p := filepath.Join(dir, name)
		body := fmt.Sprintf("interfaces: [%s]\nlisteners: [9092]\nexempt_peers: [10.0.0.0/24]\nmode: enforce\nproduce: {capacity: 100MiB}\nfetch: {capacity: 100MiB}\n"+
			"bootstrap: [%s:9092]\nkeep_attached_on_exit: false\nmetrics_address: %s\nsocket: %s\npin_path: %s\n",
			pair.BrokerDev, pair.BrokerIP, metricsAddr, socket, filepath.Join(fs, "sluice"))
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", socket)
	roSocket := filepath.Join(ro, "sluice", "sluice.sock")
	unwritable := write("ro-socket.yaml", roSocket)

	// dump is every trace an agent could leave: qdiscs, filters, TCX
	// programs, devices, pins, the socket's directory.
	dump := func() string {
		trace := hostTrace(pair, idx, fs)
		if _, err := os.Stat(filepath.Dir(socket)); err == nil {
			trace += "socket directory\n"
		}
		return trace
	}
	command := func(ctx context.Context, prefix []string, args ...string) *exec.Cmd {
		argv := append([]string{"netns", "exec", pair.Broker.Name}, prefix...)
		cmd := exec.CommandContext(ctx, "ip", append(append(argv, bin), args...)...)
		cmd.Env = append(os.Environ(), asMainEnv+"=1")
		return cmd
	}
	before := dump()

	// The file starts as it is: the agent attaches (an htb root, TCX
	// programs, pins), and check-config run meanwhile finds nothing wrong
	// with the port and socket the agent holds.
	ready := filepath.Join(dir, "ready")
	agent := command(context.Background(), nil, "run", "--config", good, "--ready-file", ready)
	var agentLog bytes.Buffer
	agent.Stderr = &agentLog
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 150 && !fileExists(ready); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	during := dump()
	// The status socket says which build runs (sluice version, status).
	var running string
	if snap, err := status.Query(socket); err != nil {
		t.Errorf("status of the running agent: %v", err)
	} else {
		running = snap.AgentVersion
	}
	version, revision, _ := buildVersion()
	if want := version + " revision " + revision; running != want {
		t.Errorf("the running agent's snapshot gives its version as %q, want %q", running, want)
	}
	var stdout, stderr bytes.Buffer
	checkErr := pair.Broker.Do(func() error {
		return run(context.Background(), []string{"check-config", "--config", good}, &stdout, &stderr)
	})
	agent.Process.Signal(syscall.SIGTERM)
	if err := agent.Wait(); err != nil || !fileExists(ready) {
		t.Fatalf("the agent with the file as it is: %v\n%s", err, agentLog.String())
	}
	if during == before || !strings.Contains(during, `"kind":"htb"`) || !strings.Contains(during, "bpffs "+filepath.Join(fs, "sluice")+"\n") || !strings.Contains(during, "host record") {
		t.Fatalf("the agent attached nothing to refuse:\n%s", during)
	}
	if checkErr != nil {
		t.Errorf("check-config while the agent runs (it holds metrics_address and the socket): %v\n%s%s", checkErr, stdout.String(), stderr.String())
	}
	if after := dump(); after != before {
		t.Fatalf("the agent's stop left the namespace changed.\nbefore:\n%s\nafter:\n%s", before, after)
	}

	for _, c := range []struct {
		name   string
		file   string
		prefix []string
		// hold takes what the cause needs for the run's length.
		hold func() (release func())
		want []string
	}{
		{name: "metrics_address in use", file: good, hold: func() func() {
			l, err := pair.Broker.Listen(metricsAddr)
			if err != nil {
				t.Fatal(err)
			}
			return func() { l.Close() }
		}, want: []string{fmt.Sprintf("sluice: refused (not restarted): metrics_address %s is in use by another process (", metricsAddr), "): free it or set metrics_address\n"}},
		{name: "socket on a read-only file system", file: unwritable, want: []string{
			"sluice: refused (not restarted): socket " + roSocket + " cannot be created: its directory is on a read-only file system (mkdir " + filepath.Dir(roSocket) + ": read-only file system): " +
				"set socket: /run/sluice/sluice.sock (the unit's RuntimeDirectory; its ProtectSystem=strict leaves the other directories read-only) or a path in a writable directory\n"}},
		{name: "programs the verifier rejects", file: good, prefix: []string{setpriv, dropPerfmon[1], dropPerfmon[2]}, want: []string{
			"sluice: refused (not restarted): the kernel's verifier (Linux ", ") rejects sluice's BPF programs: program sluice_", "pointer arithmetic",
			": give the agent CAP_BPF and CAP_PERFMON (the unit grants both) and run a kernel sluice supports (Linux 5.18 or later); sluice check-config prints the verifier's log\n"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			release := func() {}
			if c.hold != nil {
				release = c.hold()
			}
			defer release()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := command(ctx, c.prefix, "run", "--config", c.file)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != daemon.ExitRefused {
				t.Errorf("exit: %v, want status %d", err, daemon.ExitRefused)
			}
			if n := strings.Count(stderr.String(), "\n"); n != 1 {
				t.Errorf("%d lines logged, want the one naming the cause:\n%s", n, stderr.String())
			}
			for _, w := range c.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("the line lacks %q:\n%s", w, stderr.String())
				}
			}
			if after := dump(); after != before {
				t.Errorf("the refused start changed the namespace.\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}

	// check-config predicts each, in the same words, as a problem of this
	// host (exit status 2).
	l, err := pair.Broker.Listen(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	err = pair.Broker.Do(func() error {
		return run(context.Background(), []string{"check-config", "--config", unwritable}, &stdout, &stderr)
	})
	l.Close()
	if exitStatus(err) != 2 {
		t.Errorf("check-config with metrics_address taken and a read-only socket directory: %v, want exit 2", err)
	}
	for _, want := range []string{"this host: 2 problem(s) that `sluice run` would refuse to start with:\n",
		fmt.Sprintf("  metrics_address %s is in use by another process (sluice.test, pid %d): free it or set metrics_address\n", metricsAddr, os.Getpid()),
		"  socket " + roSocket + " cannot be created: its directory is on a read-only file system (access " + ro + ": read-only file system): set socket: /run/sluice/sluice.sock"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("check-config lacks %q:\n%s", want, stderr.String())
		}
	}
	cmd := command(context.Background(), []string{setpriv, dropPerfmon[1], dropPerfmon[2]}, "check-config", "--config", good, "-o", "json")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("check-config without CAP_PERFMON: %v, want exit 2", err)
	}
	r := struct {
		Stage       string
		Problems    []checkProblem
		VerifierLog []string `json:"verifier_log"`
	}{}
	if err := json.Unmarshal(out, &r); err != nil || r.Stage != "kernel" || len(r.Problems) != 1 ||
		!strings.HasPrefix(r.Problems[0].Message, "the kernel's verifier (Linux ") || !strings.Contains(r.Problems[0].Message, "give the agent CAP_BPF and CAP_PERFMON") ||
		!slices.ContainsFunc(r.VerifierLog, func(l string) bool { return strings.Contains(l, "pointer arithmetic") }) {
		t.Errorf("check-config without CAP_PERFMON: %v %+v\n%s", err, r, out)
	}
}

// Under the unit's ProtectSystem=strict only its RuntimeDirectory,
// StateDirectory and ReadWritePaths are writable: check-config, as root
// where the unit is installed, names a socket outside them as a problem,
// though this shell could create it, and warns of one in the unit's
// private /tmp. Drop-ins are read as systemd reads them.
func TestCheckConfigPredictsTheUnitSandbox(t *testing.T) {
	units := t.TempDir()
	saved := unitDirs
	unitDirs = []string{filepath.Join(units, "etc"), filepath.Join(units, "lib")}
	t.Cleanup(func() { unitDirs = saved })
	if _, ok := installedSandbox(); ok {
		t.Fatal("a unit found where none is installed")
	}
	unit, err := os.ReadFile("../../deploy/sluice.service")
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(unitDirs[1], 0o755)
	os.WriteFile(filepath.Join(unitDirs[1], "sluice.service"), unit, 0o644)
	sb, ok := installedSandbox()
	if !ok || !sb.Strict || !sb.PrivateTmp || fmt.Sprint(sb.Writable) != "[/run/sluice /sys/fs/bpf /var/lib/sluice]" {
		t.Fatalf("the shipped unit read as %+v", sb)
	}
	for path, allowed := range map[string]bool{"/run/sluice/sluice.sock": true, "/run/sluice/sub/x.sock": true, "/run/sluicex/s.sock": false,
		"/run/sluice.sock": false, "/etc/sluice/sluice.sock": false, "/var/lib/sluice/s.sock": true, "/tmp/sluice.sock": true} {
		if sb.allows(path) != allowed {
			t.Errorf("socket %s allowed: %v, want %v", path, !allowed, allowed)
		}
	}
	if sb.reachable("/tmp/sluice.sock") || !sb.reachable("/run/sluice/sluice.sock") {
		t.Error("a socket in the unit's private /tmp is reachable, or one in /run/sluice is not")
	}
	// A drop-in (in the more precedent directory) that resets and adds.
	os.MkdirAll(filepath.Join(unitDirs[0], "sluice.service.d"), 0o755)
	os.WriteFile(filepath.Join(unitDirs[0], "sluice.service.d", "sock.conf"), []byte("[Service]\nReadWritePaths=\nReadWritePaths=-/srv/sluice\nPrivateTmp=no\n"), 0o644)
	if sb, _ := installedSandbox(); fmt.Sprint(sb.Writable) != "[/run/sluice /srv/sluice /var/lib/sluice]" || sb.PrivateTmp || !sb.allows("/srv/sluice/s.sock") {
		t.Errorf("with the drop-in: %+v", sb)
	}
	os.RemoveAll(filepath.Join(unitDirs[0], "sluice.service.d"))

	netns.RequireRoot(t, "check-config checks the host only as root")
	pair := netns.NewPair(t)
	fs := t.TempDir()
	if err := maps.MountBPFFS(fs); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(fs, 0)
	check := func(socket string) (string, error) {
		p := filepath.Join(t.TempDir(), "sluice.yaml")
		os.WriteFile(p, []byte(fmt.Sprintf("interfaces: [%s]\nlisteners: [9092]\nexempt_peers: [10.0.0.0/24]\nmode: enforce\nproduce: {capacity: 100MiB}\nfetch: {capacity: 100MiB}\nsocket: %s\npin_path: %s\n",
			pair.BrokerDev, socket, filepath.Join(fs, "sluice"))), 0o600)
		var stdout, stderr bytes.Buffer
		err := pair.Broker.Do(func() error {
			return run(context.Background(), []string{"check-config", "--config", p}, &stdout, &stderr)
		})
		return stdout.String() + stderr.String(), err
	}
	// Writable here, not under the unit (nor in its private /tmp).
	runDir, err := os.MkdirTemp("/run", "sluice-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(runDir)
	outside := filepath.Join(runDir, "sluice.sock")
	out, err := check(outside)
	if exitStatus(err) != 2 || !strings.Contains(out, "socket "+outside+" is outside the directories "+filepath.Join(unitDirs[1], "sluice.service")+
		" lets the agent write (ProtectSystem=strict: /run/sluice, /sys/fs/bpf, /var/lib/sluice): the agent could not create it and would refuse to start: set socket: /run/sluice/sluice.sock") {
		t.Errorf("a socket outside /run/sluice under the unit: %v\n%s", err, out)
	}
	if out, err := check("/run/sluice/sluice.sock"); err != nil || strings.Contains(out, "socket /run") || strings.Contains(out, "socket:") {
		t.Errorf("the unit's socket: %v\n%s", err, out)
	}
}
