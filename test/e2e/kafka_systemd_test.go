package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/maps"
	"github.com/sluice-dev/sluice/test/harness"
)

// TestKafkaSystemdRestart is TestKafkaRestartDurability with the agent run
// as the installed unit under a real systemd (this machine's own, booted as
// PID 1 of a PID + mount namespace that shares the broker host's network
// namespace, `make install` inside): a SASL producer held by its user's
// quota (alice, 5 MB/s) and a consumer whose fetch session is held by a
// configured topic-partition (events-0, 3 MB/s) keep their limits across
// `systemctl restart sluice` and across `systemctl kill -s KILL sluice`,
// which Restart=on-failure brings back. Each change must give a new main
// process that logs re-adopting what the previous one left attached; over
// the 5 s after each change the broker sockets' tcp_info must show both
// clients within ±5 % of their limits, no 2-second rate from the first
// change to the last window's end above 1.05 × a limit, and the Java tools
// must neither exit nor log an error or a disconnection meanwhile. Then
// systemctl stop and `sluice unload` inside, and systemd killed, must leave
// the broker's interface as it was before the unit first started (qdiscs,
// filters, TCX programs, IFB devices), and the host's /tmp intact.
func TestKafkaSystemdRestart(t *testing.T) {
	began := time.Now()
	w, passwords, login := restartWorld(t)

	u := bootUnit(t, w)
	const aliceLimit, sessionLimit = 5e6, 3e6
	// The world's configuration, with the paths the unit's sandbox allows
	// (pins under /sys/fs/bpf, the socket in its RuntimeDirectory) and the
	// shipped stale_after: a killed agent is back RestartSec=2 s plus a
	// start later, and until then the data path keeps its last rates.
	cfg := w.WriteConfig("systemd", harness.Config{ProduceCapacity: "200MB", FetchCapacity: "200MB", KeepAttached: true, StaleAfter: "10s",
		Listeners: "[{port: 9092, protocol: SASL_PLAINTEXT}]",
		Extra: "sasl: {mechanism: SCRAM-SHA-512, username: sluice, password: " + passwords["sluice"] + "}\n" +
			"entities:\n  users:\n    alice: {producer_byte_rate: " + itoa(aliceLimit) + "}\n" +
			"  topic-partitions:\n    events-0: {consumer_byte_rate: " + itoa(sessionLimit) + "}\n"})
	u.configure(cfg)
	u.systemctl("start", "sluice")
	started := u.mainPID()
	// The harness reads the agent's status where the unit made its socket.
	w.Socket = u.sd.Path("/run/sluice/sluice.sock")

	prod, cons := restartClients(t, w, login)
	// The unit's agent shapes the broker's interface (it runs in the
	// broker host's network namespace): what teardown must undo.
	attached := brokerAttachments(t, w)
	time.Sleep(3 * time.Second) // settle, as metered does
	produceTrace, fetchTrace := w.TraceClient(0, meterEvery, prod), w.TraceClient(1, meterEvery, cons)
	windows := map[string][2]float64{}
	window := func(name string) { windows[name] = restartWindow(t, w, prod, cons) }
	window("before")
	// What the Java tools log from here on is what the changes caused.
	logs := []string{filepath.Join(w.Dir, "client-alice-producer.log"), filepath.Join(w.Dir, "client-session-consumer.log")}
	logFrom := make([]int, len(logs))
	for i, l := range logs {
		data, _ := os.ReadFile(l)
		logFrom[i] = len(data)
	}

	loadBefore := loadAverage()
	restartFrom := time.Now()
	limits := sampleLimits(w, restartFrom)
	u.systemctl("restart", "sluice") // returns once the new agent is ready (Type=notify)
	restartedAt := time.Now()
	restarted := u.mainPID()
	restartReadopted := u.readopted(restarted)
	window("after systemctl restart")

	u.systemctl("kill", "-s", "KILL", "sluice")
	killedAt := time.Now()
	revived := u.waitNewMain(restarted)
	backAfter := time.Since(killedAt)
	killReadopted := u.readopted(revived)
	restarts, err := u.sd.Show("sluice", "NRestarts")
	if err != nil {
		t.Fatal(err)
	}
	window("after systemctl kill -s KILL")
	restartTo := time.Now()
	ownLimits := limits()
	loadAfter := loadAverage()
	peakProduce, peakProduceAt, pp := stopAtPeak(t, produceTrace, restartFrom, restartTo)
	peakFetch, peakFetchAt, fp := stopAtPeak(t, fetchTrace, restartFrom, restartTo)
	// When things happened, in seconds from `systemctl restart`: where a
	// peak falls says which change let it through.
	since := func(at time.Time) float64 { return at.Sub(restartFrom).Seconds() }
	timeline := map[string]any{"restart_returned": since(restartedAt), "killed": since(killedAt), "back_after_kill": since(killedAt.Add(backAfter)),
		"peak_2s_produce_from": since(peakProduceAt), "peak_2s_fetch_from": since(peakFetchAt),
		"produce_1s_bps": secondRates(pp, restartFrom, restartTo), "fetch_1s_bps": secondRates(fp, restartFrom, restartTo)}
	var complaints []string
	for i, l := range logs {
		data, _ := os.ReadFile(l)
		for _, line := range strings.Split(string(data[logFrom[i]:]), "\n") {
			if javaTrouble.MatchString(line) {
				complaints = append(complaints, filepath.Base(l)+": "+line)
			}
		}
	}
	exited := prod.ExitedEarly() || cons.ExitedEarly()
	produced, consumed := producerSaid(prod), consumerSaid(cons)
	prod.Stop()
	cons.Stop()

	journal, _ := u.sd.Run("journalctl", "-u", "sluice", "--no-pager", "-o", "short-precise", "--since", fmt.Sprintf("@%d", restartFrom.Unix()-2))
	leftAttached, teardownErr := u.teardown()

	pass := peakProduce <= 1.05*aliceLimit && peakFetch <= 1.05*sessionLimit && !exited && len(complaints) == 0 &&
		started != restarted && restarted != revived && restartReadopted != "" && killReadopted != "" && restarts != "0" &&
		attached != u.untouched && leftAttached == "" && teardownErr == nil
	for _, r := range windows {
		pass = pass && within(r[0], aliceLimit, 0.05) && within(r[1], sessionLimit, 0.05)
	}
	teardown := "clean (stop, unload, systemd killed; the host's /tmp intact)"
	if teardownErr != nil {
		teardown = teardownErr.Error()
	}
	if !pass {
		t.Logf("journal of sluice.service:\n%s", journal)
	}
	record(t, Result{
		Name: "kafka-systemd-restart",
		Pass: pass,
		Measured: map[string]any{"windows_produce_fetch_bps": windows, "peak_2s_produce_bps": peakProduce, "peak_2s_fetch_bps": peakFetch,
			"measured_at":       meteredAt,
			"main_pids":         map[string]string{"start": started, "systemctl restart": restarted, "after systemctl kill -s KILL": revived},
			"n_restarts":        restarts,
			"readopted":         map[string]string{"systemctl restart": restartReadopted, "after systemctl kill -s KILL": killReadopted},
			"back_after_kill_s": backAfter.Seconds(), "timeline_s": timeline,
			"sluice_dynamic_limits": ownLimits, "host_load_avg": map[string]string{"before": loadBefore, "after": loadAfter},
			"java_exited": exited, "java_complaints": complaints, "producer_said": produced, "consumer_said": consumed,
			"broker_interface_before_unit": u.untouched, "broker_interface_while_held": attached,
			"left_attached_on_broker_interface": leftAttached, "teardown": teardown, "wall_s": time.Since(began).Seconds()},
		Expected: map[string]any{"alice_bps": aliceLimit, "events_0_bps": sessionLimit, "tolerance": 0.05,
			"peak_2s_max": "1.05 × each limit from systemctl restart to the last window's end",
			"main_pid":    "a new one after each change, re-adopting (journal)", "java": "no exit, no error or disconnection logged",
			"broker_interface": "the unit's agent attached while the clients were held; after teardown as before the unit's first start",
			"teardown":         "stop, unload and systemd killed without an error; the host's /tmp intact"},
	})
}

// limitSample is sluice's own dynamic limit of alice (produce) and
// events-0 (fetch) at a moment (seconds from `systemctl restart`): a
// diagnostic beside the kernel's figures, saying whether an agent lowered
// a limit where the clients dipped.
type limitSample struct {
	At      float64    `json:"at_s"`
	Produce status.Bps `json:"alice"`
	Fetch   status.Bps `json:"events_0"`
}

// sampleLimits asks the agent for its limits every half second (no answer
// while no agent runs) until the returned function is called, which
// returns the samples.
func sampleLimits(w *harness.World, from time.Time) func() []limitSample {
	var out []limitSample
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			if s, err := w.Status(); err == nil {
				p, f := entityOf(s, maps.Produce, "user", "alice"), entityOf(s, maps.Fetch, "topic-partition", "events-0")
				if p != nil && f != nil {
					out = append(out, limitSample{At: time.Since(from).Seconds(), Produce: p.DynamicLimit, Fetch: f.DynamicLimit})
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() []limitSample {
		close(stop)
		<-done
		return out
	}
}

// loadAverage is the host's /proc/loadavg (1, 5, 15 min): this 2-core
// host is shared, and the Java clients' rates dip when it is busy.
func loadAverage() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// secondRates is a trace's rate over each second from from to to.
func secondRates(points []harness.MeterPoint, from, to time.Time) []float64 {
	var out []float64
	var last *harness.MeterPoint
	for i := range points {
		p := &points[i]
		if p.At.Before(from) || p.At.After(to) {
			continue
		}
		if last == nil {
			last = p
		} else if d := p.At.Sub(last.At); d >= time.Second {
			out = append(out, float64(p.Bytes-last.Bytes)/d.Seconds())
			last = p
		}
	}
	return out
}

// javaTrouble is a Java tool's log line that tells of a failure or a lost
// connection (the tools log at WARN and above).
var javaTrouble = regexp.MustCompile(`(?i)\b(ERROR|WARN)\b|exception|disconnect`)

// unitHost is the installed sluice unit under systemd in the broker's
// network namespace.
type unitHost struct {
	t  *testing.T
	w  *harness.World
	sd *harness.Systemd
	// untouched is the broker interface's attachments before systemd
	// booted: teardown must leave them so.
	untouched string
	done      bool
	left      string // what teardown found attached beyond untouched
	err       error
}

// bootUnit boots systemd in the broker host's network namespace and runs
// `make install` inside; the test's cleanup tears it down if the test did
// not, and fails it if the broker's interface is not left as it was.
func bootUnit(t *testing.T, w *harness.World) *unitHost {
	t.Helper()
	untouched := brokerAttachments(t, w)
	sd, err := harness.BootSystemd(filepath.Join("/run/netns", w.Pair.Broker.Name), w.Dir)
	if err != nil {
		t.Fatal(err)
	}
	u := &unitHost{t: t, w: w, sd: sd, untouched: untouched}
	t.Cleanup(func() {
		if u.done { // the test tore it down and judged that itself
			return
		}
		if t.Failed() {
			out, _ := sd.Run("journalctl", "-u", "sluice", "--no-pager", "-o", "short-precise", "-n", "60")
			t.Logf("journal of sluice.service:\n%s", out)
		}
		left, err := u.teardown()
		if err != nil {
			t.Error(err)
		}
		if left != "" {
			t.Errorf("left on the broker's interface:\n%s\nbefore the unit:\n%s", left, u.untouched)
		}
	})
	root, _ := filepath.Abs("../..")
	if _, err := sd.Run("make", "-C", root, "--no-print-directory", "install"); err != nil {
		t.Fatal(err)
	}
	return u
}

// configure installs path as the unit's /etc/sluice/sluice.yaml, its pins
// and socket moved to where the unit's sandbox lets the agent write.
func (u *unitHost) configure(path string) {
	u.t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		u.t.Fatal(err)
	}
	yaml := regexp.MustCompile(`(?m)^pin_path: .*$`).ReplaceAllString(string(data), "pin_path: /sys/fs/bpf/sluice")
	yaml = regexp.MustCompile(`(?m)^socket: .*$`).ReplaceAllString(yaml, "socket: /run/sluice/sluice.sock")
	if err := os.WriteFile(u.sd.Path("/etc/sluice/sluice.yaml"), []byte(yaml), 0o640); err != nil {
		u.t.Fatal(err)
	}
	if out, err := u.sd.Run("sluice", "check-config", "--config", "/etc/sluice/sluice.yaml"); err != nil {
		u.t.Fatalf("check-config: %v\n%s", err, out)
	}
}

// systemctl runs systemctl inside; a failure ends the test with the unit's
// journal.
func (u *unitHost) systemctl(args ...string) {
	u.t.Helper()
	if _, err := u.sd.Run(append([]string{"systemctl"}, args...)...); err != nil {
		u.t.Fatal(err)
	}
}

// mainPID is the unit's main process (its pid inside systemd's namespace).
func (u *unitHost) mainPID() string {
	u.t.Helper()
	pid, err := u.sd.Show("sluice", "MainPID")
	if err != nil || pid == "0" {
		u.t.Fatalf("no main process of sluice.service (%q): %v", pid, err)
	}
	return pid
}

// waitNewMain waits until the unit is active again under a main process
// other than old, at most 30 s (RestartSec=2 s plus a start).
func (u *unitHost) waitNewMain(old string) string {
	u.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		// One systemctl a poll: the clients share the host's two cores.
		out, _ := u.sd.Run("systemctl", "show", "-p", "MainPID", "-p", "ActiveState", "sluice")
		pid, active := "", false
		for _, line := range strings.Fields(out) {
			if v, ok := strings.CutPrefix(line, "MainPID="); ok {
				pid = v
			}
			active = active || line == "ActiveState=active"
		}
		if pid != old && pid != "0" && pid != "" && active {
			return pid
		}
		time.Sleep(200 * time.Millisecond) // polling systemd, bounded by the deadline
	}
	u.t.Fatalf("sluice.service not active under a new main process within 30 s of the kill")
	return ""
}

// readopted is the re-adoption line main process pid logged ("" if none
// within 10 s: journald takes a moment to store a line).
func (u *unitHost) readopted(pid string) string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := u.sd.Run("journalctl", "--no-pager", "-o", "cat", "_PID="+pid)
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "re-adopted programs left attached by the previous agent") {
				return line
			}
		}
		if time.Now().After(deadline) {
			return ""
		}
		time.Sleep(200 * time.Millisecond) // polling the journal, bounded by the deadline
	}
}

// teardown stops the unit, removes what it left attached
// (keep_attached_on_exit: `sluice unload`, as an operator would), kills
// systemd, and returns the broker interface's attachments afterwards if
// they differ from untouched ("" if not), and whether the host's /tmp came
// through. Once; later calls return the first answers.
func (u *unitHost) teardown() (string, error) {
	if u.done {
		return u.left, u.err
	}
	u.done = true
	var errs []string
	if _, err := u.sd.Run("systemctl", "stop", "sluice"); err != nil {
		errs = append(errs, err.Error())
	}
	if _, err := os.Stat(u.sd.Path("/usr/local/bin/sluice")); err == nil {
		if _, err := u.sd.Run("sluice", "unload", "--config", "/etc/sluice/sluice.yaml"); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if err := u.sd.Close(); err != nil {
		errs = append(errs, err.Error())
	}
	if now := brokerAttachments(u.t, u.w); now != u.untouched {
		u.left = now
	}
	if len(errs) > 0 {
		u.err = fmt.Errorf("teardown: %s", strings.Join(errs, "; "))
	}
	return u.left, u.err
}

// brokerAttachments describes what is attached to the broker's interface
// and its namespace: qdiscs, tc filters, the TCX programs (bpftool 7.1
// does not show TCX) and IFB devices.
func brokerAttachments(t *testing.T, w *harness.World) string {
	t.Helper()
	dev := w.Pair.BrokerDev
	var b strings.Builder
	for _, args := range [][]string{{"tc", "qdisc", "show", "dev", dev}, {"tc", "filter", "show", "dev", dev, "ingress"},
		{"tc", "filter", "show", "dev", dev, "egress"}, {"ip", "-o", "link", "show", "type", "ifb"}} {
		out, _ := exec.Command("ip", append([]string{"netns", "exec", w.Pair.Broker.Name}, args...)...).CombinedOutput()
		fmt.Fprintf(&b, "%s: %s\n", strings.Join(args, " "), strings.TrimSpace(string(out)))
	}
	err := w.Pair.Broker.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		for _, hook := range []struct {
			name string
			typ  ebpf.AttachType
		}{{"ingress", ebpf.AttachTCXIngress}, {"egress", ebpf.AttachTCXEgress}} {
			r, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: hook.typ})
			if err != nil {
				return fmt.Errorf("query tcx %s: %w", hook.name, err)
			}
			fmt.Fprintf(&b, "tcx %s: %d programs\n", hook.name, len(r.Programs))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
