// Package daemon is `sluice run`'s process around the agent's decision
// core: it loads the configuration and the data path (carrying pinned
// state over), attaches to the interfaces or adopts what an earlier agent
// left, chooses and builds the shaper and the metadata client, serves the
// status socket and metrics, runs the cycle and learn loops, reloads on
// SIGHUP, file changes and `sluice reload`, notifies systemd, and on exit
// detaches or leaves everything for the next agent. Refusals exit 78.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"github.com/fsnotify/fsnotify"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vishvananda/netlink"

	"github.com/sluice-dev/sluice/agent"
	"github.com/sluice-dev/sluice/agent/attach"
	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/metadata"
	"github.com/sluice-dev/sluice/agent/shaper"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/internal/metricslistener"
	"github.com/sluice-dev/sluice/maps"
)

// RunDaemon is `sluice run`: the agent's whole lifecycle on a host. It
// loads the configuration, loads and pins the data path, attaches it to
// every interface (or re-adopts what a previous agent left attached),
// builds the agent with its real edges (shaper backends, metadata client,
// metrics listener, status socket), reloads on SIGHUP and file changes,
// and on return (ctx ended, or a failure at any step) detaches everything
// it attached, unless keep_attached_on_exit leaves it for the next agent.
// readyFile, when set, is written once the first cycle has run (systemd's
// READY=1 is sent either way).
func RunDaemon(ctx context.Context, configPath, readyFile string, build agent.BuildInfo, stderr io.Writer) error {
	// SIGHUP is caught before anything else: its default action would kill
	// an agent still loading or attaching, leaving half a setup behind. One
	// that arrives before the agent runs is a reload once it does.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cfg, err := configfile.Load(configPath)
	if errors.Is(err, fs.ErrNotExist) {
		// No file: restarting cannot make one (an exit 1 would be restarted
		// until the start limit, each round logging the same line).
		return fmt.Errorf("%w: %s: %w: restore it (the package's conffile; sluice check-config checks it) or give --config the file's path", ErrRefused, configPath, err)
	}
	if err != nil {
		return refusal(fmt.Errorf("%s: %w", configPath, err))
	}
	level := new(slog.LevelVar) // follows log_level on reload
	level.Set(cfg.LogLevel)
	log := slog.New(NewLogHandler(stderr, cfg.LogFormat, level))
	r := &daemon{cfg: cfg, log: log, level: level, path: configPath, build: build, hup: hup}
	failed := true // until the agent ran and stopped as asked
	defer func() { r.cleanup(failed) }()
	log.Debug("setting up", "config", configPath)
	// What a restart cannot fix and needs no BPF is refused before
	// anything is loaded or attached: the host stays as it was found.
	if err := r.preflight(); err != nil {
		return refusal(err)
	}
	if err := r.setup(); err != nil {
		return refusal(startRefusal(err))
	}
	if err := r.run(ctx, readyFile); err != nil {
		if !r.started {
			err = startRefusal(err)
		}
		return refusal(err)
	}
	failed = false
	return nil
}

// DataPathOptions sizes the data path from a configuration: the one
// place (the daemon loads it, check-config verifies it) that maps
// configuration keys to map sizes.
func DataPathOptions(cfg config.Config) maps.Options {
	opts := maps.DefaultOptions()
	opts.MaxEntities = cfg.MaxEntities + 2 // unknown and overflow
	opts.MaxConnections = cfg.MaxConnections
	opts.SampleBytes = min(cfg.SampleBytes, maps.SampleMax)
	opts.PinDir = cfg.PinPath
	// Pins of other sizes (max_connections or max_entities changed, or a
	// release sized them otherwise) are carried over, not refused.
	opts.Migrate = true
	return opts
}

// attachModes names how the programs are attached (tcx, legacy), once
// per mode in use.
func (r *daemon) attachModes() string {
	var modes []string
	for _, a := range r.atts {
		if m := a.Mode.String(); !slices.Contains(modes, m) {
			modes = append(modes, m)
		}
	}
	return strings.Join(modes, ",")
}

type daemon struct {
	cfg     config.Config
	log     *slog.Logger
	level   *slog.LevelVar
	path    string
	build   agent.BuildInfo
	dp      *maps.Datapath
	atts    []*attach.Attachment
	agent   *agent.Agent // owns the shaper, metadata client and metrics listener once built
	samples *maps.SampleReader
	// latencies: the data path's request latency measurements.
	latencies *maps.LatencyReader
	closers   []io.Closer
	hup       chan os.Signal
	// adopted[i]: atts[i] was left attached by an earlier agent (not
	// attached by this one).
	adopted []bool
	// metrics is the process's metrics listener (nil until the agent is
	// built); the teardown closes it.
	metrics *metricslistener.Listener
	// metricsHold holds metrics_address from the preflight until the
	// agent's metrics listener takes it over.
	metricsHold net.Listener
	// statusListener is the status socket, open from the preflight on.
	statusListener net.Listener
	// socketDirs are the directories made for the status socket, deepest
	// first: they go with it.
	socketDirs []string
	// mountedBPFFS is the bpffs this start mounted ("": none), on the
	// directories bpffsDirs it made: a failed start unmounts and removes
	// them.
	mountedBPFFS string
	bpffsDirs    []string
	// started: the first cycle is under way; before, a failure is the
	// start's.
	started bool
	// host: this agent's entry in /var/lib/sluice's record (hostrecord.go).
	host hostRecord
}

// preflight takes, before anything is loaded or attached, what the agent
// needs of the host and a restart would not change: the metrics address
// (held until the agent serves on it) and the status socket. Each failure
// is a *Refusal naming the key and the fix, or a live socket of another
// agent (status.ErrSocketTaken).
func (r *daemon) preflight() error {
	l, err := holdMetricsAddress(r.cfg.MetricsAddress)
	if err != nil {
		return err
	}
	r.metricsHold = l
	sl, made, err := listenStatus(r.cfg.Socket)
	if err != nil {
		return err
	}
	r.statusListener, r.socketDirs = sl, made
	r.closers = append(r.closers, sl)
	return nil
}

func (r *daemon) setup() error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("raise memlock limit: %w", err)
	}
	bpffs := filepath.Dir(r.cfg.PinPath)
	wasBPFFS, missing := isBPFFS(bpffs), missingDirs(bpffs)
	if err := maps.MountBPFFS(bpffs); err != nil {
		removeDirs(missing)
		return err
	}
	if !wasBPFFS {
		r.mountedBPFFS, r.bpffsDirs = bpffs, missing
	}
	r.host.begin(r.log, r.cfg.PinPath) // before the pins exist
	d, err := maps.Load(DataPathOptions(r.cfg))
	if err != nil {
		if errors.Is(refusal(err), ErrRefused) {
			return err
		}
		// maps.Load flattens the verifier's rejection into text (every
		// line of its log): the same programs loaded again without pins
		// give it back typed, and the refusal says it in one line.
		if _, _, verr := VerifyDataPath(r.cfg); errors.As(verr, new(*Refusal)) {
			return verr
		}
		return err
	}
	r.dp = d
	r.log.Info("data path loaded", "sample_publication", d.SamplePublication())
	if m := d.Migrated(); m != nil {
		r.log.Info("carried the pinned state over into maps of the new sizes", "maps_and_entries", m)
	}
	if err := r.detachDropped(); err != nil {
		return err
	}
	r.host.droppedDetached()
	for _, name := range r.cfg.Interfaces {
		link, err := netlink.LinkByName(name)
		if err != nil {
			return fmt.Errorf("%w: interfaces: %s: %w", ErrRefused, name, err)
		}
		idx := link.Attrs().Index
		r.host.attaching(idx, name)
		mode := attachMode(r.cfg.Attach)
		position := attachPosition(r.cfg.AttachPosition)
		a, err := attach.AdoptAt(r.cfg.PinPath, idx, d.IngressProgram(), d.EgressProgram(), position)
		if errors.Is(err, attach.ErrOtherAgent) {
			return fmt.Errorf("%w: interfaces: %s: %w", ErrRefused, name, err)
		}
		adopted := err == nil
		if adopted && mode == attach.Legacy {
			// The previous agent used TCX; this one is told to use clsact.
			a.Detach()
			adopted = false
		}
		if adopted {
			r.log.Info("re-adopted programs left attached by the previous agent", "interface", name)
		} else if a, err = attach.AttachWith(idx, d.IngressProgram(), d.EgressProgram(), attach.Options{Mode: mode, Position: position}); err != nil {
			if mode == attach.TCX && errors.Is(err, ebpf.ErrNotSupported) {
				return fmt.Errorf("%w: attach: tcx: this kernel has no TCX links (Linux 6.6 and later): use auto or clsact: %w", ErrRefused, err)
			}
			if errors.Is(err, attach.ErrOtherAgent) || errors.Is(err, attach.ErrNoSlot) {
				return fmt.Errorf("%w: interfaces: %s: %w", ErrRefused, name, err)
			}
			return err
		} else if err := a.Pin(r.cfg.PinPath); err != nil {
			// Pinned links outlive a killed agent: the data path keeps the
			// last rates until stale_after, then fails open.
			a.Detach()
			return err
		}
		if a.Mode == attach.TCX {
			// An earlier agent with attach: clsact left its filters here;
			// they would run after these links and count twice.
			if removed, err := attach.RemoveLeftoverFiltersOn(idx); err != nil {
				if adopted {
					a.Release() // the previous agent's links stay, as cleanup leaves them
				} else {
					a.Detach()
				}
				return err
			} else if removed {
				r.log.Info("removed the clsact filters an earlier agent left (this one attaches with TCX)", "interface", name)
			}
		}
		if a.AddedClsact() {
			r.recordAddedClsact(map[int]string{idx: name})
		}
		r.atts = append(r.atts, a)
		r.adopted = append(r.adopted, adopted)
		r.log.Info("attached", "interface", name, "mode", a.Mode.String())
		if ahead, err := a.Ahead(); err != nil {
			r.log.Warn("could not read what runs ahead of sluice on this interface", "interface", name, "err", err)
		} else {
			for _, x := range ahead {
				if x.EndsChain {
					r.log.Warn("blind: a program ahead of sluice can end the chain; segments it passes, redirects or drops are not counted, learned or shaped (attach_position: first puts sluice ahead of it)",
						"interface", name, "hook", x.Hook, "kind", x.Kind, "program", x.Name, "verdict", x.Verdict)
				}
			}
		}
	}
	if r.samples, err = d.NewSampleReader(); err != nil {
		return err
	}
	if r.latencies, err = d.NewLatencyReader(); err != nil {
		return err
	}
	return nil
}

// detachDropped detaches what an earlier agent left on interfaces that are
// no longer in the configuration: their pinned links, htb trees and IFB
// devices (else they stay governed by classes nobody updates).
func (r *daemon) detachDropped() error {
	keep := map[int]bool{}
	for _, name := range r.cfg.Interfaces {
		if link, err := netlink.LinkByName(name); err == nil {
			keep[link.Attrs().Index] = true
		}
	}
	added, err := maps.Owned(r.cfg.PinPath, maps.OwnedClsact)
	if err != nil {
		return err
	}
	// Interfaces an earlier agent attached to: by its link pins (TCX), and
	// by sluice's legacy filters (attach: clsact, which leaves no pins).
	dropped := map[int]bool{}
	for _, idx := range attach.PinnedInterfaces(r.cfg.PinPath) {
		dropped[idx] = !keep[idx]
	}
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list devices: %w", err)
	}
	for _, l := range links {
		idx := l.Attrs().Index
		if keep[idx] || dropped[idx] {
			continue
		}
		removed, err := attach.RemoveLeftoverFiltersOn(idx)
		if err != nil {
			return fmt.Errorf("detach %s, dropped from interfaces: %w", l.Attrs().Name, err)
		}
		dropped[idx] = removed
	}
	for idx, drop := range dropped {
		if !drop {
			continue
		}
		name := fmt.Sprint(idx)
		if link, err := netlink.LinkByIndex(idx); err == nil {
			name = link.Attrs().Name
		}
		if err := attach.DetachPinned(r.cfg.PinPath, idx); err != nil {
			return fmt.Errorf("detach %s, dropped from interfaces: %w", name, err)
		}
		if err := shaper.RemoveLeftoverTrees(idx, nil); err != nil {
			return fmt.Errorf("remove the trees on %s, dropped from interfaces: %w", name, err)
		}
		if recorded, ok := added[idx]; ok {
			if _, err := attach.RemoveAddedClsact(idx, recorded); err != nil {
				return fmt.Errorf("remove the clsact qdisc sluice added on %s, dropped from interfaces: %w", name, err)
			}
			maps.ForgetOwned(r.cfg.PinPath, maps.OwnedClsact, idx)
		}
		r.log.Info("detached an interface dropped from the configuration", "interface", name)
	}
	return nil
}

func (r *daemon) run(ctx context.Context, readyFile string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dp, err := agent.NewLoadedDataPath(r.dp)
	if err != nil {
		return err
	}
	// The metadata client (topic IDs → names, and the cluster's client
	// quotas with kafka_quotas: import); the agent rebuilds it when a reload
	// changes bootstrap, sasl, tls, metadata_refresh or kafka_quotas.
	newMetadata := func(c config.Config) (agent.Metadata, error) {
		opts, err := metadata.ClientOptions(c)
		if err != nil {
			return agent.Metadata{}, err
		}
		client, err := kgo.NewClient(opts...)
		if err != nil {
			return agent.Metadata{}, fmt.Errorf("bootstrap: %w", err)
		}
		runCtx, stop := context.WithCancel(ctx)
		topics := metadata.NewTopics(client, c.MetadataRefresh, metadata.DefaultMinRefreshGap, r.log)
		go topics.Run(runCtx)
		md := agent.Metadata{Topics: topics, Brokers: topics, Stop: func() { stop(); client.Close() }}
		if c.KafkaQuotas == config.KafkaQuotasImport {
			quotas := metadata.NewClusterQuotas(client, c.MetadataRefresh, config.MaxEntityIDs, r.log)
			go quotas.Run(runCtx)
			md.Quotas = quotas
		}
		return md, nil
	}
	ifindexes := make([]int, len(r.atts))
	for i, att := range r.atts {
		ifindexes[i] = att.Index
	}
	newShaper := func(cfg config.Config) (agent.ShaperChoice, error) {
		choice, err := ChooseShaper(cfg, r.dp, ifindexes)
		if err == nil {
			var added map[int]string
			if s, ok := choice.Shaper.(interface{ AddedClsact() map[int]string }); ok {
				added = s.AddedClsact()
			}
			r.recordAddedClsact(added)
			r.recordIFBs(choice.IFBIndex, choice.EgressIFBIndex)
		}
		return choice, err
	}
	// The process's metrics listener: the daemon opens and closes it; a
	// reload moves it. It serves the agent's metrics, built once the agent is.
	var metrics *agent.Metrics
	r.metrics = metricslistener.New(func(addr, webConfigFile string) (func(), error) {
		if r.metricsHold != nil { // the preflight's: the agent's listener takes the port over
			r.metricsHold.Close()
			r.metricsHold = nil
		}
		return metrics.Open(addr, webConfigFile)
	})
	a, err := agent.New(r.cfg, agent.Deps{DataPath: dp, NewShaper: newShaper, NewMetadata: newMetadata, NewCluster: newClusterLink(ctx, r.log), Log: r.log,
		FailReloadStep: reloadFaultHook(), Leads: newLeadsFile(), Hooks: agent.AttachedHooks(r.atts, r.cfg.AttachPosition, nil), Version: r.build.Version + " revision " + r.build.Revision})
	if err != nil {
		return err
	}
	r.agent = a
	r.log.Info("shaper chosen", "shaper", a.ShaperKind(), "why", a.ShaperReason())
	metrics = agent.NewMetrics(a, dp, agent.MetricsInfo{Build: r.build, Attach: r.attachModes()})
	if err := r.metrics.Open(r.cfg); err != nil {
		// Taken in the instant between the preflight's hold and this
		// listen: refused all the same, after cleanup detaches.
		return metricsRefusal(r.cfg.MetricsAddress, err)
	}
	// The watcher ends before the agent's cleanup starts: no reload runs
	// on an agent that is closing.
	// `sluice reload` (systemd's ExecReload) asks on the status socket and
	// waits for the verdict; the watcher runs it, in turn with SIGHUP and
	// file changes.
	asks := make(chan chan status.ReloadResult)
	askReload := func() (status.ReloadResult, error) {
		reply := make(chan status.ReloadResult, 1)
		select {
		case asks <- reply:
		case <-ctx.Done():
			return status.ReloadResult{}, errors.New("the agent is stopping")
		}
		select {
		case res, ok := <-reply:
			if !ok {
				return status.ReloadResult{}, errors.New("the agent is stopping")
			}
			return res, nil
		case <-ctx.Done(): // a reload under way still finishes before cleanup
			return status.ReloadResult{}, errors.New("the agent is stopping")
		}
	}
	go a.ServeStatus(r.statusListener, askReload)
	reloads := newReloader(a, r.metrics, r.level, reloadFaultHook(), r.log)
	watching := make(chan struct{})
	go func() { defer close(watching); r.watchConfig(ctx, reloads, asks) }()
	stopWatching := func() { cancel(); <-watching }
	defer stopWatching() // a failure before Run

	ready := func() {
		if err := NotifyReady(readyFile); err != nil {
			r.log.Warn("readiness notification", "err", err)
		}
		r.log.Info("sluice agent running", "interfaces", r.cfg.Interfaces, "listeners", r.cfg.Listeners, "mode", r.cfg.Mode,
			"metrics", r.cfg.MetricsAddress, "socket", r.cfg.Socket)
	}
	r.started = true
	err = runAgent(ctx, a, r.samples, r.latencies, reloads.interval, ready, r.log)
	r.samples, r.latencies = nil, nil // closed by runAgent
	NotifyStopping()
	stopWatching() // a reload under way finishes first
	r.log.Info("stopping")
	return err
}

// watchConfig reloads on SIGHUP and when the file changes (editors and
// configuration management replace files, so the directory is watched).
func (r *daemon) watchConfig(ctx context.Context, reloads *reloader, asks <-chan chan status.ReloadResult) {
	var events chan fsnotify.Event
	if w, err := fsnotify.NewWatcher(); err == nil {
		defer w.Close()
		if err := w.Add(filepath.Dir(r.path)); err == nil {
			events = w.Events
		}
	}
	reload := func(why string) (status.ReloadResult, bool) {
		if ctx.Err() != nil {
			return status.ReloadResult{}, false // select picks at random among ready cases: stopping wins
		}
		r.log.Info("reloading configuration", "why", why)
		cfg, err := configfile.Load(r.path)
		return reloads.run(why, cfg, err), true
	}
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.hup:
			reload("SIGHUP")
		case reply := <-asks:
			if res, ok := reload("sluice reload"); ok {
				reply <- res
			} else {
				close(reply)
			}
		case ev := <-events:
			if filepath.Clean(ev.Name) == filepath.Clean(r.path) {
				debounce = time.After(200 * time.Millisecond)
			}
		case <-debounce:
			reload("file changed")
		}
	}
}

// attachPosition maps attach_position to the attach package's position.
func attachPosition(key string) attach.Position {
	if key == config.AttachFirst {
		return attach.First
	}
	return attach.Last
}

// attachMode maps the attach key to the attach package's mechanism.
func attachMode(key string) attach.Mode {
	switch key {
	case config.AttachTCX:
		return attach.TCX
	case config.AttachClsact:
		return attach.Legacy
	default:
		return attach.Auto
	}
}
