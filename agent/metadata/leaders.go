package metadata

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Leaders counts, for the cluster budgets' topics, how many partitions
// each broker leads: the reservation of a cluster budget is spread by it
// before any demand is seen. Only the listed topics are asked for, every
// interval (leaders move more often than topics appear).
type Leaders struct {
	adm      *kadm.Client
	topics   []string
	interval time.Duration
	log      *slog.Logger

	mu sync.RWMutex
	// led[topic][broker] counts the partitions broker leads; a topic is
	// missing until read.
	led map[string]map[int32]uint32
	// Refreshes and Failures count metadata reads.
	Refreshes, Failures uint64
}

// NewLeaders reads leadership of topics through client (not closed here).
// Each topic is asked for once: budgets may share one, and a request that
// names a topic twice fails ("metadata returned only 1 topics of 2
// requested"), which left every count unknown.
func NewLeaders(client *kgo.Client, topics []string, interval time.Duration, log *slog.Logger) *Leaders {
	topics = slices.Clone(topics)
	slices.Sort(topics)
	return &Leaders{adm: kadm.NewClient(client), topics: slices.Compact(topics), interval: interval, log: log, led: map[string]map[int32]uint32{}}
}

// Led returns how many partitions of topics broker leads, and false until
// every one of the topics has been read (a partial count would spread the
// reservation by the wrong fractions).
func (l *Leaders) Led(broker int32, topics []string) (uint32, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n uint32
	for _, t := range topics {
		byBroker, ok := l.led[t]
		if !ok {
			return 0, false
		}
		n += byBroker[broker]
	}
	return n, true
}

// Refresh reads the topics' partition leaders. A topic that cannot be read
// keeps its last count.
func (l *Leaders) Refresh(ctx context.Context) error {
	if len(l.topics) == 0 {
		return nil
	}
	md, err := l.adm.Metadata(ctx, l.topics...)
	if err != nil {
		l.mu.Lock()
		l.Failures++
		l.mu.Unlock()
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Refreshes++
	for name, t := range md.Topics {
		if t.Err != nil {
			continue
		}
		byBroker := map[int32]uint32{}
		for _, p := range t.Partitions {
			if p.Err == nil && p.Leader >= 0 {
				byBroker[p.Leader]++
			}
		}
		l.led[name] = byBroker
	}
	return nil
}

// Run refreshes until ctx ends.
func (l *Leaders) Run(ctx context.Context) {
	ticker := time.NewTicker(l.interval)
	defer ticker.Stop()
	failing := false
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := l.Refresh(rctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			l.log.Warn("partition leaders of the cluster budgets' topics could not be read; the last counts stay", "err", err)
			failing = true
		case err == nil && failing:
			l.log.Info("partition leaders read again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
