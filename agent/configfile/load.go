// Package configfile reads sluice's YAML configuration into a
// config.Config: every key checked, each problem named by its dotted key
// (and, for environment overrides, by the variable), through Viper so that
// SLUICE_… variables override the file.
package configfile

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/agent/config"
)

// EnvPrefix is the prefix of environment overrides: SLUICE_MODE,
// SLUICE_PRODUCE_CAPACITY (dots become underscores).
const EnvPrefix = "SLUICE"

// Load reads and validates the file at path. On any problem it returns
// Problems naming every bad key, and the caller keeps its last good Config.
func Load(path string) (config.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return config.Config{}, fmt.Errorf("read configuration: %w", err)
	}
	return Parse(data)
}

// schema lists every key a section may hold; "*" marks a section whose keys
// are names (client-ids, topic-partitions) with entity quotas below them.
var schema = map[string][]string{
	"": {"interfaces", "listeners", "exempt_peers", "mode", "shaper", "produce_shaper", "attach", "attach_position", "replace_root_qdisc", "refresh_interval", "update_threshold",
		"stale_after", "rate_window", "max_queue_delay", "produce", "fetch", "bootstrap", "sasl", "tls",
		"metadata_refresh", "kafka_quotas", "max_entities", "max_unconfigured_entities", "new_entities_per_peer", "entity_idle_timeout", "max_connections", "sample_bytes",
		"samples_per_second", "metrics_address", "metrics", "socket", "pin_path", "keep_attached_on_exit", "log_level", "log_format", "entities", "cluster"},
	"cluster":          clusterKeys,
	"cluster.entities": {"clients", "users"},
	"produce":          directionKeys,
	"fetch":            directionKeys,
	"sasl":             {"mechanism", "username", "password", "password_file"},
	"tls":              {"enabled", "ca_file", "cert_file", "key_file", "server_name", "insecure_skip_verify"},
	"entities":         {"clients", "topic-partitions", "users", "peers", "listeners"},
	"metrics":          {"entities", "max_entity_series", "web_config_file"},
}

var directionKeys = []string{"capacity", "safety_ratio", "min_demand", "activity_threshold", "min_limit", "memory_cycles", "overcommit_confirm_cycles"}

var quotaKeys = []string{"producer_byte_rate", "consumer_byte_rate", "producer_byte_reservation", "consumer_byte_reservation", "quota_weight",
	"produce_latency_objective", "fetch_latency_objective"}

// Parse validates a YAML document into a Config. Global keys go through
// Viper, so SLUICE_… environment variables override them. The entities
// section is decoded from the YAML directly: Viper lowercases keys and
// splits them on dots, and client-ids and topic names are case-sensitive
// and often dotted.
func Parse(data []byte) (config.Config, error) {
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return config.Config{}, config.Problems{{Key: "(file)", Message: "not valid YAML: " + err.Error()}}
	}
	if raw == nil {
		raw = map[string]any{}
	}
	l := &loader{cfg: config.Default()}
	l.checkKeys("", raw)

	v := viper.New()
	v.SetConfigType("yaml")
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_", "-", "_"))
	v.AutomaticEnv()
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return config.Config{}, config.Problems{{Key: "(file)", Message: err.Error()}}
	}
	l.v = v
	l.globals()
	l.entities(raw["entities"])
	l.cluster(raw["cluster"])
	l.clusterLocalEntities()
	for _, p := range l.cfg.Validate() {
		if strings.HasSuffix(p.Key, ".min_limit") && !l.has(p.Key) {
			p.Message += " (the default; set it lower for so small a capacity)"
		}
		l.fail(p.Key, "%s", p.Message)
	}
	if len(l.problems) > 0 {
		sort.SliceStable(l.problems, func(i, j int) bool { return l.problems[i].Key < l.problems[j].Key })
		return config.Config{}, l.problems
	}
	return l.cfg, nil
}

type loader struct {
	v        *viper.Viper
	cfg      config.Config
	problems config.Problems
}

func (l *loader) fail(key, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if name := EnvName(key); name != "" {
		if _, set := os.LookupEnv(name); set {
			// The environment overrode the file: say where the value came from.
			msg += " (from the environment: " + name + ")"
		}
	}
	l.problems = append(l.problems, config.Problem{Key: key, Message: msg})
}

// EnvName is the environment variable that overrides a global key
// (produce.capacity: SLUICE_PRODUCE_CAPACITY), or "" for keys under
// entities, which only the file sets.
func EnvName(key string) string {
	key, _, _ = strings.Cut(key, "[") // exempt_peers[2]: the list's variable
	if key == "" || strings.HasPrefix(key, "entities") || strings.ContainsAny(key, "( ") {
		return ""
	}
	return EnvPrefix + "_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

// checkKeys reports unknown keys with the nearest valid one.
func (l *loader) checkKeys(section string, m map[string]any) {
	allowed := schema[section]
	for _, k := range slices.Sorted(maps.Keys(m)) {
		path := joinKey(section, k)
		if !contains(allowed, k) {
			l.fail(path, "unknown key%s", suggest(k, allowed))
			continue
		}
		if sub, ok := m[k].(map[string]any); ok && schema[path] != nil {
			l.checkKeys(path, sub)
		}
	}
}

// globals reads the top-level keys, one section at a time; the rules
// that join keys of several sections are config.Config.Validate's.
func (l *loader) globals() {
	c := &l.cfg
	l.strings("interfaces", &c.Interfaces)
	l.listeners()
	l.exemptPeers()
	l.modes()
	l.timing()
	l.sizes()
	l.direction("produce", &c.Produce)
	l.direction("fetch", &c.Fetch)
	l.strings("bootstrap", &c.Bootstrap)
	l.sasl()
	l.tls()
	l.metrics()
	l.paths()
	l.logging()
}
