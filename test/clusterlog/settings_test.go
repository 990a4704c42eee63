package clusterlog_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cluster/kafkalog"
)

// topicSettings reads what Kafka says of the coordination topic: the
// replica count of its partition and the two election settings.
func topicSettings(t *testing.T, adm *kadm.Client) (rf int, minISR, unclean string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range td[topic].Partitions {
		rf = len(p.Replicas)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc.Configs {
		switch c.Key {
		case "min.insync.replicas":
			minISR = c.MaybeValue()
		case "unclean.leader.election.enable":
			unclean = c.MaybeValue()
		}
	}
	return rf, minISR, unclean
}

// The Log creates the topic so that an acknowledged report survives one
// broker's loss: three replicas on three brokers, min.insync.replicas 2,
// unclean election off, whatever the brokers' defaults.
func TestTopicCreatedToKeepReports(t *testing.T) {
	c := newCluster(t, kfake.BrokerConfigs(map[string]string{"min.insync.replicas": "1"}))
	l := openLog(t, c.ListenAddrs(), newClock())
	seq := uint64(0)
	waitFor(t, within(15*time.Second), "a published report", func() bool {
		// A report published before the topic is examined is refused.
		seq++
		l.Publish(report(1, seq))
		return l.Stats().Published > 0
	})
	rf, minISR, unclean := topicSettings(t, kadm.NewClient(rawClient(t, c)))
	if rf != 3 || minISR != "2" || unclean != "false" {
		t.Errorf("created with replication factor %d, min.insync.replicas %q, unclean.leader.election.enable %q; want 3, 2, false", rf, minISR, unclean)
	}
	if s := l.Stats(); s.TopicErrors != 0 {
		t.Errorf("stats %+v, want no topic error", s)
	}
}

// A topic someone else made that cannot keep reports is refused, with the
// setting, its value and what is wanted named; nothing is written to it;
// once the operator fixes it, the Log takes it without a restart.
func TestTopicThatCannotKeepReportsRefused(t *testing.T) {
	cases := []struct {
		name    string
		rf      int16
		configs map[string]*string
		says    string
		fix     map[string]*string
	}{
		{"min.insync.replicas 1", 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("1")},
			"has min.insync.replicas=1, want at least 2 with 3 replicas", map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}},
		{"unclean election on", 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2"), "unclean.leader.election.enable": kadm.StringPtr("true")},
			"has unclean.leader.election.enable=true", map[string]*string{"unclean.leader.election.enable": kadm.StringPtr("false")}},
		{"one replica", 1, nil, "has replication factor 1, want at least 3 on a cluster of 3 brokers", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			adm := kadm.NewClient(rawClient(t, c))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := adm.CreateTopic(ctx, 1, tc.rf, tc.configs, topic); err != nil {
				t.Fatal(err)
			}
			l := openLog(t, c.ListenAddrs(), newClock())
			waitFor(t, within(15*time.Second), "a topic error", func() bool { return l.Stats().TopicErrors > 0 })
			if s := l.Stats(); !strings.Contains(s.LastError, tc.says) {
				t.Fatalf("last error %q, want it to say %q", s.LastError, tc.says)
			}
			l.Publish(report(2, 1))
			if s := l.Stats(); s.PublishFailed != 1 || s.Published != 0 {
				t.Errorf("stats %+v, want the publish refused", s)
			}
			ends, err := adm.ListEndOffsets(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			ends.Each(func(o kadm.ListedOffset) {
				if o.Offset != 0 {
					t.Errorf("partition %d ends at %d, want nothing written to a refused topic", o.Partition, o.Offset)
				}
			})
			if tc.fix == nil {
				return
			}
			var alter []kadm.AlterConfig
			for k, v := range tc.fix {
				alter = append(alter, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: v})
			}
			if _, err := adm.AlterTopicConfigs(ctx, alter, topic); err != nil {
				t.Fatal(err)
			}
			// Re-examined every 10 s (badTopicRetry).
			waitFor(t, within(25*time.Second), "the fixed topic taken", func() bool {
				l.Publish(report(2, 2))
				return l.Stats().Published > 0
			})
		})
	}
}

// An accepted topic whose settings an operator weakens afterwards
// (kafka-configs --alter min.insync.replicas=1) is refused at its next
// examination, with the setting named, and nothing more is written to it;
// set back, it is taken again. The examination interval is 2 s here (a
// minute by default).
func TestAcceptedTopicWeakenedIsRefused(t *testing.T) {
	c := newCluster(t)
	l, err := kafkalog.Open(kafkalog.Options{
		Topic: topic, ReplicationFactor: -1, MaxDelivery: time.Second, SettingsRecheck: 2 * time.Second,
		Client: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)},
		Now:    newClock().Now, Log: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	seq := uint64(0)
	publish := func() { seq++; l.Publish(report(1, seq)) }
	waitFor(t, within(15*time.Second), "the topic accepted", func() bool { publish(); return l.Stats().Published > 0 })
	adm := kadm.NewClient(rawClient(t, c))
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	alter := func(v string) {
		t.Helper()
		if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "min.insync.replicas", Value: kadm.StringPtr(v)}}, topic); err != nil {
			t.Fatal(err)
		}
	}
	alter("1")
	waitFor(t, within(10*time.Second), "the weakened topic refused", func() bool { return l.Stats().TopicErrors > 0 })
	if s := l.Stats(); !strings.Contains(s.LastError, "has min.insync.replicas=1, want at least 2 with 3 replicas") {
		t.Fatalf("last error %q, want the weakened setting named", s.LastError)
	}
	before := l.Stats()
	publish()
	if s := l.Stats(); s.PublishFailed != before.PublishFailed+1 || s.Published != before.Published {
		t.Fatalf("stats %+v after a publish to the refused topic (before %+v), want it refused", s, before)
	}
	alter("2")
	// Refused, it is examined every 10 s (badTopicRetry).
	waitFor(t, within(25*time.Second), "the fixed topic taken again", func() bool {
		publish()
		return l.Stats().Published > before.Published
	})
}
