package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cilium/ebpf/rlimit"
	"github.com/fsnotify/fsnotify"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vishvananda/netlink"

	"github.com/sluice-dev/sluice/agent"
	"github.com/sluice-dev/sluice/agent/attach"
	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/learner"
	"github.com/sluice-dev/sluice/maps"
)

const defaultConfigPath = "/etc/sluice/sluice.yaml"

// runAgent: `sluice run --config FILE [--ready-file FILE]`.
func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", defaultConfigPath, "configuration file")
	readyFile := fs.String("ready-file", "", "write this file once the agent is attached and has run its first cycle")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return fmt.Errorf("%s: %w", *path, err)
	}
	level := new(slog.LevelVar) // follows log_level on reload
	level.Set(cfg.LogLevel)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	r := &runner{cfg: cfg, log: log, level: level, path: *path}
	defer r.cleanup()
	if err := r.setup(ctx); err != nil {
		return err
	}
	return r.run(ctx, *readyFile)
}

type runner struct {
	cfg      config.Config
	log      *slog.Logger
	level    *slog.LevelVar
	path     string
	dp       *maps.Datapath
	atts     []*attach.Attachment
	agent    *agent.Agent // owns the shaper once built
	samples  *maps.SampleReader
	closers  []io.Closer
	keepPins bool
}

func (r *runner) setup(ctx context.Context) error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("raise memlock limit: %w", err)
	}
	if err := maps.MountBPFFS(filepath.Dir(r.cfg.PinPath)); err != nil {
		return err
	}
	opts := maps.DefaultOptions()
	opts.MaxEntities = r.cfg.MaxEntities + 2 // unknown and overflow
	opts.MaxConnections = r.cfg.MaxConnections
	opts.SampleBytes = min(r.cfg.SampleBytes, maps.SampleMax)
	opts.PinDir = r.cfg.PinPath
	d, err := maps.Load(opts)
	if err != nil {
		return err
	}
	r.dp = d
	for _, name := range r.cfg.Interfaces {
		link, err := netlink.LinkByName(name)
		if err != nil {
			return fmt.Errorf("interfaces: %s: %w", name, err)
		}
		idx := link.Attrs().Index
		a, err := attach.Adopt(r.cfg.PinPath, idx, d.IngressProgram(), d.EgressProgram())
		if err == nil {
			r.log.Info("re-adopted programs left attached by the previous agent", "interface", name)
		} else if a, err = attach.Attach(idx, d.IngressProgram(), d.EgressProgram(), attach.Auto); err != nil {
			return err
		} else if err := a.Pin(r.cfg.PinPath); err != nil {
			// Pinned links outlive a killed agent: the data path keeps the
			// last rates until stale_after, then fails open.
			a.Detach()
			return err
		}
		r.atts = append(r.atts, a)
		r.log.Info("attached", "interface", name, "mode", a.Mode.String())
	}
	if r.samples, err = d.NewSampleReader(); err != nil {
		return err
	}
	return nil
}

func (r *runner) run(ctx context.Context, readyFile string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dp, err := agent.NewLoadedDataPath(r.dp)
	if err != nil {
		return err
	}
	// The metadata client (topic IDs → names); the agent rebuilds it when a
	// reload changes bootstrap, sasl, tls or metadata_refresh.
	newTopics := func(c config.Config) (learner.TopicNames, func(), error) {
		opts, err := learner.ClientOptions(c)
		if err != nil {
			return nil, nil, err
		}
		client, err := kgo.NewClient(opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("bootstrap: %w", err)
		}
		runCtx, stop := context.WithCancel(ctx)
		topics := learner.NewMetadataTopics(client, c.MetadataRefresh, learner.DefaultMinRefreshGap, r.log)
		go topics.Run(runCtx)
		return topics, func() { stop(); client.Close() }, nil
	}
	ifindexes := make([]int, len(r.atts))
	for i, att := range r.atts {
		ifindexes[i] = att.Index
	}
	newShaper := func(cfg config.Config) (agent.ShaperChoice, error) { return agent.ChooseShaper(cfg, r.dp, ifindexes) }
	a, err := agent.New(r.cfg, agent.Deps{DataPath: dp, NewShaper: newShaper, NewTopics: newTopics, LogLevel: r.level, Log: r.log})
	if err != nil {
		return err
	}
	r.agent = a
	r.log.Info("shaper chosen", "shaper", a.ShaperKind(), "why", a.ShaperReason())
	metrics := agent.NewMetrics(a, dp)
	ml, err := net.Listen("tcp", r.cfg.MetricsAddress)
	if err != nil {
		return fmt.Errorf("metrics_address: %w", err)
	}
	r.closers = append(r.closers, ml)
	go metrics.Serve(ml)
	sl, err := agent.ListenStatus(r.cfg.Socket)
	if err != nil {
		return err
	}
	r.closers = append(r.closers, sl)
	go a.ServeStatus(sl)
	go r.watchConfig(ctx, a)

	ready := func() {
		if err := agent.NotifyReady(readyFile); err != nil {
			r.log.Warn("readiness notification", "err", err)
		}
		r.log.Info("sluice agent running", "interfaces", r.cfg.Interfaces, "listeners", r.cfg.Listeners, "mode", r.cfg.Mode,
			"metrics", ml.Addr().String(), "socket", r.cfg.Socket)
	}
	err = a.Run(ctx, r.samples, ready)
	r.samples = nil // closed by Run
	agent.NotifyStopping()
	return err
}

// watchConfig reloads on SIGHUP and when the file changes (editors and
// configuration management replace files, so the directory is watched).
func (r *runner) watchConfig(ctx context.Context, a *agent.Agent) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var events chan fsnotify.Event
	if w, err := fsnotify.NewWatcher(); err == nil {
		defer w.Close()
		if err := w.Add(filepath.Dir(r.path)); err == nil {
			events = w.Events
		}
	}
	reload := func(why string) {
		cfg, err := config.Load(r.path)
		r.log.Info("reloading configuration", "why", why)
		a.Reload(cfg, err)
	}
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			reload("SIGHUP")
		case ev := <-events:
			if filepath.Clean(ev.Name) == filepath.Clean(r.path) {
				debounce = time.After(200 * time.Millisecond)
			}
		case <-debounce:
			reload("file changed")
		}
	}
}

// cleanup detaches everything, unless keep_attached_on_exit leaves the
// programs, trees and pins for the next agent to adopt.
func (r *runner) cleanup() {
	for _, c := range r.closers {
		c.Close()
	}
	if r.samples != nil {
		r.samples.Close()
	}
	if r.agent != nil {
		r.agent.StopMetadata()
	}
	keep := r.cfg.KeepAttachedOnExit
	var errs []error
	for _, a := range r.atts {
		if keep {
			a.Release() // the links are pinned since attach
			continue
		}
		errs = append(errs, a.Detach())
	}
	if r.agent != nil && !keep {
		errs = append(errs, r.agent.CloseShaper())
	}
	if r.dp != nil {
		errs = append(errs, r.dp.Close())
		if !keep {
			errs = append(errs, r.dp.Unpin())
		}
	}
	if err := errors.Join(errs...); err != nil {
		r.log.Error("cleanup", "err", err)
	} else if keep {
		r.log.Info("left attached for the next agent (keep_attached_on_exit)", "pins", r.cfg.PinPath)
	} else {
		r.log.Info("detached; devices restored")
	}
}
