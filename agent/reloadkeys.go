package agent

import (
	"reflect"
	"slices"
	"sort"

	"github.com/sluice-dev/sluice/agent/config"
)

// Which configuration keys a reload may change while the agent runs, and
// which need a restart.

// metadataChanges says which of the metadata client's keys differ.
func metadataChanges(old, next config.Config) map[string]bool {
	return map[string]bool{
		"bootstrap": !slices.Equal(old.Bootstrap, next.Bootstrap), "sasl": old.SASL != next.SASL, "tls": old.TLS != next.TLS,
		"metadata_refresh": old.MetadataRefresh != next.MetadataRefresh, "kafka_quotas": old.KafkaQuotas != next.KafkaQuotas,
	}
}

func anyChanged(keys map[string]bool) bool {
	for _, changed := range keys {
		if changed {
			return true
		}
	}
	return false
}

// restartOnly names the keys that differ between two configurations and
// cannot change while the agent runs (the metadata client's can when
// metadataLive: the agent rebuilds it). The metrics listener's keys are
// the daemon's, which moves it.
func restartOnly(old, next config.Config, metadataLive bool) []string {
	var keys []string
	if !slices.Equal(old.Interfaces, next.Interfaces) {
		keys = append(keys, "interfaces")
	}
	if !metadataLive {
		for name, changed := range metadataChanges(old, next) {
			if changed {
				keys = append(keys, name)
			}
		}
	}
	for name, changed := range map[string]bool{
		"pin_path": old.PinPath != next.PinPath, "attach": old.Attach != next.Attach, "attach_position": old.AttachPosition != next.AttachPosition,
		"replace_root_qdisc": old.ReplaceRootQdisc != next.ReplaceRootQdisc,
		"max_entities":       old.MaxEntities != next.MaxEntities, "max_connections": old.MaxConnections != next.MaxConnections,
		"rate_window": old.RateWindow != next.RateWindow, "sample_bytes": old.SampleBytes != next.SampleBytes,
		"socket": old.Socket != next.Socket, "log_format": old.LogFormat != next.LogFormat,
		// Every agent of the cluster must split budgets with the same
		// inputs and period: a cluster change is a coordinated restart.
		"cluster": !reflect.DeepEqual(old.Cluster, next.Cluster),
		"refresh_interval (with a cluster section)": old.Cluster.Enabled && old.RefreshInterval != next.RefreshInterval,
		"stale_after (with a cluster section)":      old.Cluster.Enabled && old.StaleAfter != next.StaleAfter,
	} {
		if changed {
			keys = append(keys, name)
		}
	}
	sort.Strings(keys)
	return keys
}
