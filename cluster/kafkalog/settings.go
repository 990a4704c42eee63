package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The coordination topic must keep every acknowledged report through one
// broker's loss: a report the View missed is a raise some other host made
// without it. Kafka keeps an acks=all write through a broker's loss only
// with a second in-sync copy (min.insync.replicas ≥ 2), a third replica so
// that one broker down still leaves two, and no unclean election that could
// crown a replica without the write. On clusters smaller than three
// brokers the topic can only be as good as the cluster: every broker a
// replica, and min.insync.replicas as high as that allows.

var errSettings = errors.New("the coordination topic cannot keep acknowledged reports")

// wantReplicas is the replication factor the topic must have on a cluster
// of brokers brokers; the operator's replication_factor may ask for more.
func wantReplicas(configured int16, brokers int) int {
	want := min(3, max(1, brokers))
	return max(want, int(configured))
}

// wantMinISR is the min.insync.replicas a topic of rf replicas must have.
func wantMinISR(rf int) int { return min(2, rf) }

// createConfigs are the settings the Log creates the topic with.
func (l *Log) createConfigs(rf int) map[string]*string {
	return map[string]*string{
		"cleanup.policy":    ptr("delete"),
		"retention.ms":      ptr(strconv.FormatInt(l.opts.Retention.Milliseconds(), 10)),
		"max.message.bytes": ptr(strconv.Itoa(topicMaxMsgConfig)),
		// Retention deletes whole segments only: a segment rolled at
		// the retention time keeps the retained log near Retention
		// instead of the default week.
		"segment.ms":                     ptr(strconv.FormatInt(l.opts.Retention.Milliseconds(), 10)),
		"min.insync.replicas":            ptr(strconv.Itoa(wantMinISR(rf))),
		"unclean.leader.election.enable": ptr("false"),
	}
}

// checkSettings refuses a topic whose replication or election settings
// cannot keep an acknowledged report, naming the setting, its value and
// what is required. rf is the replica count of the topic's partition and
// brokers the cluster's broker count, both from the metadata.
func (l *Log) checkSettings(ctx context.Context, rf, brokers int) error {
	if want := wantReplicas(l.opts.ReplicationFactor, brokers); rf < want {
		return fmt.Errorf("topic %q has replication factor %d, want at least %d on a cluster of %d brokers (%w); recreate it, or reassign its partition", l.opts.Topic, rf, want, brokers, errSettings)
	}
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeTopic
	res.ResourceName = l.opts.Topic
	res.ConfigNames = []string{"min.insync.replicas", "unclean.leader.election.enable"}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, l.client)
	if err != nil {
		return fmt.Errorf("describe configs of topic %q: %w", l.opts.Topic, err)
	}
	if len(resp.Resources) != 1 {
		return fmt.Errorf("describe configs of topic %q: %d resources in the answer, want 1", l.opts.Topic, len(resp.Resources))
	}
	r := resp.Resources[0]
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		return fmt.Errorf("describe configs of topic %q: %w", l.opts.Topic, err)
	}
	// Kafka's defaults when a value is not reported: min.insync.replicas
	// 1, unclean election off.
	minISR, unclean := 1, false
	for _, c := range r.Configs {
		if c.Value == nil {
			continue
		}
		switch c.Name {
		case "min.insync.replicas":
			n, err := strconv.Atoi(*c.Value)
			if err != nil {
				return fmt.Errorf("topic %q: min.insync.replicas %q is not a number", l.opts.Topic, *c.Value)
			}
			minISR = n
		case "unclean.leader.election.enable":
			unclean = *c.Value == "true"
		}
	}
	if want := wantMinISR(rf); minISR < want {
		return fmt.Errorf("topic %q has min.insync.replicas=%d, want at least %d with %d replicas (%w); set it with kafka-configs --alter --add-config min.insync.replicas=%d", l.opts.Topic, minISR, want, rf, errSettings, want)
	}
	if unclean {
		return fmt.Errorf("topic %q has unclean.leader.election.enable=true (%w); set it to false with kafka-configs --alter", l.opts.Topic, errSettings)
	}
	return nil
}
