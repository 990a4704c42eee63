package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The coordination topic: created with the settings the protocol needs, or,
// when it exists, checked for them, and checked again while the log runs.

// ensureTopic returns once the topic exists with one partition and settings
// that keep acknowledged reports (creating it if missing), or false when
// the Log is closed first. A topic with another partition count or weaker
// settings is reported and re-examined now and then: an operator may fix
// or recreate it.
func (l *Log) ensureTopic() bool {
	wait := topicRetryMin
	for {
		err := l.examineTopic(true)
		if err == nil {
			l.mu.Lock()
			l.topic = topicOK
			l.mu.Unlock()
			return true
		}
		if l.ctx.Err() != nil {
			return false
		}
		delay := topicRetryMin // a topic just created: look again once it is in the metadata
		if !errors.Is(err, errJustCreated) {
			l.mu.Lock()
			l.stats.TopicErrors++
			l.mu.Unlock()
			l.noteError(&l.logTopic, "cluster log topic not usable", err)
			if errors.Is(err, errPartitions) || errors.Is(err, errSettings) {
				delay = badTopicRetry
			} else {
				delay, wait = wait, min(2*wait, topicRetryMax)
			}
		}
		select {
		case <-l.ctx.Done():
			return false
		case <-time.After(delay):
		}
	}
}

// recheckTopic examines the accepted topic again and says whether it is
// refused now. Refused, it is not written to (Publish fails, so this host's
// lease runs out and it takes its fallback share, as at a refusal at
// start) until an examination finds it fixed; reading goes on, so the View
// stays current. An examination that cannot tell (the cluster does not
// answer) changes nothing.
func (l *Log) recheckTopic(wasBad bool) (bad bool) {
	err := l.examineTopic(false)
	switch {
	case err == nil:
		l.mu.Lock()
		l.topic = topicOK
		l.mu.Unlock()
		if wasBad {
			l.log.Warn("cluster log topic usable again", "topic", l.opts.Topic)
		}
		return false
	case errors.Is(err, errPartitions) || errors.Is(err, errSettings):
		l.mu.Lock()
		l.stats.TopicErrors++
		l.mu.Unlock()
		l.noteError(&l.logTopic, "cluster log topic no longer keeps reports", err)
		return true
	default:
		l.noteError(&l.logTopic, "cluster log topic not re-examined", err)
		return wasBad
	}
}

var errPartitions = errors.New("the protocol needs a single-partition topic")

// examineTopic checks the topic, creating it when it is missing (and create
// is set) and looking at it again.
func (l *Log) examineTopic(create bool) error {
	ctx, cancel := context.WithTimeout(l.ctx, requestTimeout)
	defer cancel()
	// A direct metadata request: kadm's cached one would go on saying
	// "unknown" for a topic created a moment ago.
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(l.opts.Topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, l.client)
	if err != nil {
		return fmt.Errorf("examine topic %q: %w", l.opts.Topic, err)
	}
	var found *kmsg.MetadataResponseTopic
	for i := range resp.Topics {
		if t := &resp.Topics[i]; t.Topic != nil && *t.Topic == l.opts.Topic {
			found = t
		}
	}
	if found == nil {
		return fmt.Errorf("examine topic %q: missing from the metadata answer", l.opts.Topic)
	}
	switch err := kerr.ErrorForCode(found.ErrorCode); {
	case err == nil:
		if n := len(found.Partitions); n != 1 {
			l.mu.Lock()
			l.topic = topicBad
			l.mu.Unlock()
			return fmt.Errorf("topic %q has %d partitions, want 1 (%w); it is neither read nor written", l.opts.Topic, n, errPartitions)
		}
		if err := l.checkSettings(ctx, len(found.Partitions[0].Replicas), len(resp.Brokers)); err != nil {
			if errors.Is(err, errSettings) {
				l.mu.Lock()
				l.topic = topicBad
				l.mu.Unlock()
				return fmt.Errorf("%w; it is neither read nor written", err)
			}
			return err
		}
		return nil
	case !errors.Is(err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("examine topic %q: %w", l.opts.Topic, err)
	case !create:
		return fmt.Errorf("topic %q created, not yet in the metadata: %w", l.opts.Topic, errJustCreated)
	}
	rf := wantReplicas(l.opts.ReplicationFactor, len(resp.Brokers))
	created, err := l.adm.CreateTopic(ctx, 1, int16(rf), l.createConfigs(rf), l.opts.Topic)
	if err == nil {
		err = created.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %q: %w", l.opts.Topic, err)
	}
	// Created here or by another agent just now: examine it again, since
	// the other agent's topic may differ from ours.
	return l.examineTopic(false)
}

var errJustCreated = errors.New("re-examining")

func ptr(s string) *string { return &s }
