package kafkalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/cluster"
)

// Reading the log: every report in log order from the start of what is
// retained, and how far behind the log's end the reader is.

// measureEnd takes one check: the log start (when it may matter), then the
// local time t0, then the log end. It reports whether Drain still has to
// reach an end measured so far.
func (l *Log) measureEnd() (behind bool, err error) {
	l.mu.Lock()
	needStart := !l.startKnown || l.received <= l.knownStart
	l.mu.Unlock()
	if needStart {
		start, err := l.listOffset(-2)
		if err != nil {
			return false, err
		}
		l.mu.Lock()
		l.knownStart, l.startKnown = max(l.knownStart, start), true
		l.mu.Unlock()
	}
	l.mu.Lock()
	start := l.knownStart // measured before t0, so no later than the start at t0
	l.mu.Unlock()
	t0 := l.opts.Now()
	// The end is asked after t0: the broker answers with the high
	// watermark at some moment after t0, at or past every record in the
	// log at t0.
	end, err := l.listOffset(-1)
	if err != nil {
		return false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addCheck(check{t0: t0, start: start, end: end})
	return len(l.checks) > 0, nil
}

// addCheck records a measurement and retires what Drain has already
// reached. Called with mu held.
func (l *Log) addCheck(c check) {
	l.knownEnd = max(l.knownEnd, c.end)
	if len(l.checks) < maxPendingChecks {
		l.checks = append(l.checks, c)
	} else {
		// A reader far behind: the newest check replaces the previous
		// newest. Older ones stay, so progress is still reported as
		// they are reached.
		l.checks[len(l.checks)-1] = c
	}
	l.resolveChecks()
}

// listOffset asks partition 0's leader for the log start (ts -2) or end
// (ts -1, the high watermark).
func (l *Log) listOffset(ts int64) (int64, error) {
	ctx, cancel := context.WithTimeout(l.ctx, requestTimeout)
	defer cancel()
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = l.opts.Topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = 0
	rp.Timestamp = ts
	rp.CurrentLeaderEpoch = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, l.client)
	if err != nil {
		return 0, fmt.Errorf("list offsets of %q: %w", l.opts.Topic, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if t.Topic != l.opts.Topic || p.Partition != 0 {
				continue
			}
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return 0, fmt.Errorf("list offsets of %q: %w", l.opts.Topic, err)
			}
			if p.Offset < 0 {
				return 0, fmt.Errorf("list offsets of %q: offset %d", l.opts.Topic, p.Offset)
			}
			return p.Offset, nil
		}
	}
	return 0, fmt.Errorf("list offsets of %q: partition 0 missing from the answer", l.opts.Topic)
}

// consume reads partition 0 and queues decoded reports for Drain.
func (l *Log) consume() {
	defer l.wg.Done()
	for {
		l.mu.Lock()
		full := len(l.queue) >= maxQueued
		l.mu.Unlock()
		if full {
			// Not polling lets the client stop fetching: memory stays
			// bounded while the caller does not drain.
			select {
			case <-l.ctx.Done():
				return
			case <-l.room:
				continue
			}
		}
		fetches := l.client.PollFetches(l.ctx)
		if l.ctx.Err() != nil {
			return
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
				return
			}
			if tooLarge, ok := errors.AsType[*kgo.ErrDecompressTooLarge](err); ok && topic == l.opts.Topic && partition == 0 {
				// A foreign batch the client refuses to inflate stops
				// the partition; step over it as one undecodable
				// record.
				l.client.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {0: {Epoch: tooLarge.Epoch, Offset: tooLarge.NextOffset}}})
				l.mu.Lock()
				l.stats.Undecodable++
				l.received = max(l.received, tooLarge.NextOffset)
				l.mu.Unlock()
			}
			l.noteError(&l.logFetch, "cluster log fetch failed", fmt.Errorf("fetch %s[%d]: %w", topic, partition, err))
		})
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if p.Topic != l.opts.Topic || p.Partition != 0 {
				return
			}
			l.take(p.FetchPartition)
		})
	}
}

// take decodes one partition's fetched records and queues the reports.
func (l *Log) take(p kgo.FetchPartition) {
	var got []entry
	var bad []error
	var badOffsets []int64
	last := int64(-1)
	for _, rec := range p.Records {
		last = rec.Offset
		if rec.Attrs.IsControl() {
			// A transaction marker: not a report, but an offset the
			// reader has passed.
			continue
		}
		r, err := cluster.UnmarshalReport(rec.Value)
		if err != nil {
			bad = append(bad, err)
			badOffsets = append(badOffsets, rec.Offset)
			continue
		}
		got = append(got, entry{r: r, offset: rec.Offset})
	}
	now := l.opts.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queue = append(l.queue, got...)
	if last >= 0 {
		l.received = last + 1
	}
	l.knownEnd = max(l.knownEnd, p.HighWatermark)
	if len(bad) > 0 {
		l.stats.Undecodable += uint64(len(bad))
		l.stats.LastError = fmt.Sprintf("record at offset %d: %v", badOffsets[len(bad)-1], bad[len(bad)-1])
		if l.logUndecod.allow(now) {
			l.log.Warn("records of the cluster log skipped: not reports of this format",
				"topic", l.opts.Topic, "offset", badOffsets[0], "err", bad[0],
				"skipped_now", len(bad), "skipped_unlogged_before", l.suppressed, "undecodable_total", l.stats.Undecodable)
			l.suppressed = 0
		} else {
			l.suppressed += uint64(len(bad))
		}
	}
}
