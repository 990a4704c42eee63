// Package configfile reads sluice's YAML configuration into a
// config.Config: every key checked, each problem named by its dotted key
// (and, for environment overrides, by the variable), through Viper so that
// SLUICE_… variables override the file.
package configfile

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"os"
	pathpkg "path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
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

// listeners reads listeners: ports and their security protocols.
func (l *loader) listeners() {
	c := &l.cfg
	if entries, ok := l.list("listeners"); ok {
		c.Listeners, c.ListenerProtocols = nil, map[uint16]string{}
		for i, entry := range entries {
			key := fmt.Sprintf("listeners[%d]", i)
			port, protocol := entry, any(config.ProtocolPlaintext)
			if m, isMap := entry.(map[string]any); isMap {
				for k := range m {
					if k != "port" && k != "protocol" {
						l.fail(key+"."+k, "unknown key%s", suggest(k, []string{"port", "protocol"}))
					}
				}
				port = m["port"]
				if p, set := m["protocol"]; set {
					protocol = p
				}
			}
			n, err := strconv.Atoi(strings.TrimSpace(fmt.Sprint(port)))
			if err != nil || n < 1 || n > 65535 {
				l.fail(key, "%v is not a TCP port (1-65535)", port)
				continue
			}
			name := strings.TrimSpace(fmt.Sprint(protocol))
			if !contains(config.Protocols, name) {
				l.fail(key+".protocol", "%q is not a listener protocol (%s)%s", name, strings.Join(config.Protocols, ", "), suggest(name, config.Protocols))
				continue
			}
			if _, dup := c.ListenerProtocols[uint16(n)]; dup {
				l.fail(key, "port %d is listed twice", n)
				continue
			}
			c.Listeners = append(c.Listeners, uint16(n))
			c.ListenerProtocols[uint16(n)] = name
		}
	}
}

// exemptPeers reads exempt_peers.
func (l *loader) exemptPeers() {
	c := &l.cfg
	if cidrs, ok := l.list("exempt_peers"); ok {
		c.ExemptPeers = nil
		for i, s := range cidrs {
			text := strings.TrimSpace(fmt.Sprint(s))
			p, err := parsePrefix(text)
			if err != nil {
				l.fail(fmt.Sprintf("exempt_peers[%d]", i), "%q is not a CIDR or an address", text)
				continue
			}
			c.ExemptPeers = append(c.ExemptPeers, p)
		}
	}
}

// modes reads mode, shaper, attach and attach_position.
func (l *loader) modes() {
	c := &l.cfg
	if s, ok := l.str("mode"); ok {
		switch config.Mode(s) {
		case config.ModeEnforce, config.ModeShadow:
			c.Mode = config.Mode(s)
		default:
			l.fail("mode", "%q is not a mode (enforce or shadow)%s", s, suggest(s, []string{"enforce", "shadow"}))
		}
	}
	if s, ok := l.str("shaper"); ok {
		shapers := []string{"auto", "htb", "edt", "police", "shadow"}
		if contains(shapers, s) {
			c.Shaper = s
		} else {
			l.fail("shaper", "%q is not a shaper (%s)%s", s, strings.Join(shapers, ", "), suggest(s, shapers))
		}
	}
	if s, ok := l.str("produce_shaper"); ok {
		kinds := []string{config.ProduceShaperAuto, config.ProduceShaperPolice}
		if contains(kinds, s) {
			c.ProduceShaper = s
		} else {
			l.fail("produce_shaper", "%q is not a produce shaper (%s)%s", s, strings.Join(kinds, ", "), suggest(s, kinds))
		}
	}
	l.boolean("replace_root_qdisc", &c.ReplaceRootQdisc)
	if s, ok := l.str("attach"); ok {
		kinds := []string{config.AttachAuto, config.AttachTCX, config.AttachClsact}
		if contains(kinds, s) {
			c.Attach = s
		} else {
			l.fail("attach", "%q is not an attach mechanism (%s)%s", s, strings.Join(kinds, ", "), suggest(s, kinds))
		}
	}
	if s, ok := l.str("attach_position"); ok {
		positions := []string{config.AttachLast, config.AttachFirst}
		if contains(positions, s) {
			c.AttachPosition = s
		} else {
			l.fail("attach_position", "%q is not a position (%s)%s", s, strings.Join(positions, ", "), suggest(s, positions))
		}
	}
}

// timing reads the intervals and timeouts.
func (l *loader) timing() {
	c := &l.cfg
	l.duration("refresh_interval", &c.RefreshInterval, 10*time.Millisecond)
	l.duration("stale_after", &c.StaleAfter, time.Second)
	l.duration("max_queue_delay", &c.MaxQueueDelay, time.Millisecond)
	l.duration("metadata_refresh", &c.MetadataRefresh, time.Second)
	if s, ok := l.str("kafka_quotas"); ok {
		sources := []string{config.KafkaQuotasOff, config.KafkaQuotasImport}
		if contains(sources, s) {
			c.KafkaQuotas = s
		} else {
			l.fail("kafka_quotas", "%q is not off or import%s", s, suggest(s, sources))
		}
	}
	l.duration("entity_idle_timeout", &c.EntityIdleTimeout, time.Second)
	if l.has("update_threshold") {
		if f, ok := l.float("update_threshold"); ok {
			if f < 0 || f >= 1 {
				l.fail("update_threshold", "%v must be in [0, 1)", f)
			} else {
				c.UpdateThreshold = f
			}
		}
	}
}

// sizes reads the tables' sizes and budgets.
func (l *loader) sizes() {
	c := &l.cfg
	l.integer("rate_window", &c.RateWindow, 1, 3600)
	l.integer("max_entities", &c.MaxEntities, 2, config.MaxEntityIDs)
	c.MaxUnconfiguredEntities = c.MaxEntities - min(config.ReservedConfigured, c.MaxEntities/2)
	l.integer("max_unconfigured_entities", &c.MaxUnconfiguredEntities, 0, c.MaxEntities)
	if l.has("new_entities_per_peer") {
		if f, ok := l.float("new_entities_per_peer"); ok {
			if f < 0.1 {
				l.fail("new_entities_per_peer", "%v must be at least 0.1 (new entities per second per peer)", f)
			} else {
				c.NewEntitiesPerPeer = f
			}
		}
	}
	l.integer("max_connections", &c.MaxConnections, 1024, 1<<24)
	l.integer("sample_bytes", &c.SampleBytes, 64, 4096)
	l.integer("samples_per_second", &c.SamplesPerSecond, 1, 100000)
}

// sasl reads the metadata client's SASL login.
func (l *loader) sasl() {
	c := &l.cfg
	if s, ok := l.str("sasl.mechanism"); ok {
		mechanisms := []string{"", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
		if contains(mechanisms, s) {
			c.SASL.Mechanism = s
		} else {
			l.fail("sasl.mechanism", "%q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s)
		}
	}
	l.stringTo("sasl.username", &c.SASL.Username)
	l.stringTo("sasl.password", &c.SASL.Password)
	if file, ok := l.str("sasl.password_file"); ok {
		// A secret kept out of the YAML: a file only root reads, or a
		// systemd credential (LoadCredential=sasl-password:…, then
		// password_file: $CREDENTIALS_DIRECTORY/sasl-password).
		file = os.Expand(file, func(name string) string {
			if name == "CREDENTIALS_DIRECTORY" {
				return os.Getenv(name)
			}
			return "$" + name
		})
		switch data, err := os.ReadFile(file); {
		case c.SASL.Password != "":
			l.fail("sasl.password_file", "give sasl.password or sasl.password_file, not both")
		case err != nil:
			l.fail("sasl.password_file", "%v", err)
		default:
			c.SASL.Password = strings.TrimRight(string(data), "\r\n")
		}
	}
}

// tls reads the metadata client's TLS settings, reading its files as the client will.
func (l *loader) tls() {
	c := &l.cfg
	l.boolean("tls.enabled", &c.TLS.Enabled)
	l.stringTo("tls.ca_file", &c.TLS.CAFile)
	l.stringTo("tls.cert_file", &c.TLS.CertFile)
	l.stringTo("tls.key_file", &c.TLS.KeyFile)
	l.stringTo("tls.server_name", &c.TLS.ServerName)
	l.boolean("tls.insecure_skip_verify", &c.TLS.InsecureSkipVerify)
	if c.TLS.CertFile != "" && c.TLS.KeyFile != "" {
		if _, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile); err != nil {
			l.fail("tls.cert_file", "%v", err)
		}
	}
	// Read now, as the metadata client will: a reload that names a file
	// the client cannot use is refused here, before anything changes.
	if c.TLS.CAFile != "" {
		if pem, err := os.ReadFile(c.TLS.CAFile); err != nil {
			l.fail("tls.ca_file", "%v", err)
		} else if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			l.fail("tls.ca_file", "%s holds no PEM certificate", c.TLS.CAFile)
		}
	}
}

// metrics reads metrics_address and the metrics section.
func (l *loader) metrics() {
	c := &l.cfg
	l.stringTo("metrics_address", &c.MetricsAddress)
	if s, ok := l.str("metrics.entities"); ok {
		if s == config.MetricsConfigured || s == config.MetricsAll {
			c.Metrics.Entities = s
		} else {
			l.fail("metrics.entities", "%q is not configured or all", s)
		}
	}
	l.integer("metrics.max_entity_series", &c.Metrics.MaxEntitySeries, 0, config.MaxEntityIDs)
	if s, ok := l.str("metrics.web_config_file"); ok && s != "" {
		c.Metrics.WebConfigFile = s
		// The file's own checks: TLS files that exist and load, basic
		// auth users with bcrypt hashes (exporter-toolkit's Validate).
		if err := web.Validate(s); err != nil {
			l.fail("metrics.web_config_file", "%s: %v", s, err)
		}
	}
}

// paths reads socket and pin_path.
func (l *loader) paths() {
	c := &l.cfg
	l.stringTo("socket", &c.Socket)
	l.stringTo("pin_path", &c.PinPath)
	for _, p := range []struct {
		key  string
		path string
	}{{"socket", c.Socket}, {"pin_path", c.PinPath}} {
		if !pathpkg.IsAbs(p.path) || pathpkg.Clean(p.path) != p.path || p.path == "/" {
			l.fail(p.key, "%q must be a clean absolute path, not /", p.path)
		}
	}
}

// logging reads keep_attached_on_exit, log_level and log_format.
func (l *loader) logging() {
	c := &l.cfg
	l.boolean("keep_attached_on_exit", &c.KeepAttachedOnExit)
	if s, ok := l.str("log_level"); ok {
		if err := c.LogLevel.UnmarshalText([]byte(s)); err != nil {
			l.fail("log_level", "%q is not debug, info, warn or error", s)
		}
	}
	if s, ok := l.str("log_format"); ok {
		if s == config.LogText || s == config.LogJSON {
			c.LogFormat = s
		} else {
			l.fail("log_format", "%q is not text or json", s)
		}
	}
}

func (l *loader) direction(name string, d *config.Direction) {
	key := name + ".capacity"
	if l.has(key) {
		if s, ok := l.str(key); ok && strings.TrimSpace(s) == "-1" {
			d.Capacity = config.Disabled
		} else if r, ok := l.rate(key); ok {
			if r <= 0 {
				l.fail(key, "must be -1 (disabled) or positive")
			} else {
				d.Capacity = r
			}
		}
	} else {
		l.fail(key, "is required (bytes/s such as 1000MiB, or -1 to leave %s ungoverned)", name)
	}
	if l.has(name + ".safety_ratio") {
		if f, ok := l.float(name + ".safety_ratio"); ok {
			if f <= 0 || f > 1 {
				l.fail(name+".safety_ratio", "%v must be in (0, 1]", f)
			} else {
				d.SafetyRatio = f
			}
		}
	}
	for _, r := range []struct {
		key string
		dst *float64
	}{{"min_demand", &d.MinDemand}, {"activity_threshold", &d.ActivityThreshold}, {"min_limit", &d.MinLimit}} {
		if l.has(name + "." + r.key) {
			if v, ok := l.rate(name + "." + r.key); ok {
				*r.dst = v
			}
		}
	}
	l.integer(name+".memory_cycles", &d.MemoryCycles, 1, 3600)
	l.integer(name+".overcommit_confirm_cycles", &d.OvercommitConfirmCycles, 1, 3600)
}

// entities decodes the per-entity section from the raw YAML (see Parse).
func (l *loader) entities(v any) {
	m, ok := v.(map[string]any)
	if v != nil && !ok {
		l.fail("entities", "must be a mapping with clients, topic-partitions, users, peers and listeners")
	}
	// Every TLS listener has its entity, configured or not.
	l.listenerEntities(m["listeners"])
	if m == nil {
		return
	}
	l.users(m["users"])
	l.peers(m["peers"])
	for _, section := range []string{"clients", "topic-partitions"} {
		sub, present := m[section]
		if !present || sub == nil {
			continue
		}
		entries, ok := sub.(map[string]any)
		if !ok {
			l.fail("entities."+section, "must be a mapping of names to quotas")
			continue
		}
		dst := l.cfg.Entities.Clients
		if section == "topic-partitions" {
			dst = l.cfg.Entities.TopicPartitions
		}
		for _, name := range slices.Sorted(maps.Keys(entries)) {
			path := "entities." + section + "." + name
			if section == "topic-partitions" && name != config.DefaultKey {
				if _, _, err := config.SplitTopicPartition(name); err != nil {
					if name == config.OldDefaultKey {
						l.fail(path, "%v; the template is spelled %q, as Kafka spells it", err, config.DefaultKey)
					} else {
						l.fail(path, "%v", err)
					}
					continue
				}
			}
			if section == "clients" && config.IsClientPattern(name) {
				if _, err := pathpkg.Match(name, ""); err != nil {
					l.fail(path, "not a valid client-id pattern (* any run of characters but '/', ? one character, [a-z] a class, \\ escapes): %v", err)
					continue
				}
			}
			if q, ok := l.quota(path, entries[name]); ok {
				dst[name] = q
			}
		}
	}
}

// quotaMap decodes one entities section of names to quotas.
func (l *loader) quotaMap(section string, v any) (map[string]any, bool) {
	if v == nil {
		return nil, false
	}
	if numbered, ok := v.(map[any]any); ok { // keys YAML read as numbers (ports)
		entries := make(map[string]any, len(numbered))
		for k, q := range numbered {
			entries[fmt.Sprint(k)] = q
		}
		return entries, true
	}
	entries, ok := v.(map[string]any)
	if !ok {
		l.fail("entities."+section, "must be a mapping of names to quotas")
	}
	return entries, ok
}

// peers decodes entities.peers: CIDRs (or single addresses) to quotas,
// keyed by the canonical prefix; two spellings of one prefix are refused.
func (l *loader) peers(v any) {
	entries, ok := l.quotaMap("peers", v)
	if !ok {
		return
	}
	spelled := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		path := "entities.peers." + name
		key := name
		if name != config.DefaultKey {
			p, err := parsePrefix(name)
			if err != nil {
				l.fail(path, "%q is not a CIDR or an address", name)
				continue
			}
			key = p.String()
			// An IPv4-mapped IPv6 prefix names the same peers as its IPv4
			// form (the data path keys both alike; Go's matching would
			// not): one spelling of them, or the two would disagree.
			same := ipv4Form(p).String()
			if first, dup := spelled[same]; dup {
				l.fail(path, "the same prefix as %q (%s)", first, same)
				continue
			}
			spelled[same] = name
		}
		if q, ok := l.quota(path, entries[name]); ok {
			l.cfg.Entities.Peers[key] = q
		}
	}
}

// listenerEntities decodes entities.listeners (TLS listener ports to the
// quotas of their fallback entities) and lists every TLS listener, so
// that each has its entity.
func (l *loader) listenerEntities(v any) {
	c := &l.cfg
	if entries, ok := l.quotaMap("listeners", v); ok {
		for _, name := range slices.Sorted(maps.Keys(entries)) {
			path := "entities.listeners." + name
			if name != config.DefaultKey {
				port, err := strconv.Atoi(name)
				if err != nil || port < 1 || port > 65535 || !slices.Contains(c.Listeners, uint16(port)) {
					l.fail(path, "not a port in listeners")
					continue
				}
				if protocol := c.Protocol(uint16(port)); !config.IsTLS(protocol) {
					l.fail(path, "listener %d is %s: its connections are attributed by their requests (client-id, user, topic-partition); a listener entity is for %s and %s listeners",
						port, protocol, config.ProtocolSSL, config.ProtocolSASLSSL)
					continue
				}
			}
			if q, ok := l.quota(path, entries[name]); ok {
				c.Entities.Listeners[name] = q
			}
		}
	}
	for _, port := range c.TLSListeners() {
		name := strconv.Itoa(int(port))
		if _, ok := c.Entities.Listeners[name]; !ok {
			c.Entities.Listeners[name] = config.Quota{}
		}
	}
}

// ipv4Form is an IPv4-mapped IPv6 prefix (::ffff:a.b.c.d/96+n) as the
// IPv4 prefix it names; any other prefix as it is.
func ipv4Form(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked()
	}
	return p
}

// parsePrefix reads a CIDR or a single address as a masked prefix.
func parsePrefix(text string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(text)
	if err != nil {
		a, aerr := netip.ParseAddr(text)
		if aerr != nil {
			return netip.Prefix{}, err
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return p.Masked(), nil
}

// users decodes entities.users: each user's quota keys beside a clients
// mapping of its <user, client-id> quotas.
func (l *loader) users(v any) {
	if v == nil {
		return
	}
	entries, ok := v.(map[string]any)
	if !ok {
		l.fail("entities.users", "must be a mapping of user names to quotas")
		return
	}
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		path := "entities.users." + name
		raw, _ := entries[name].(map[string]any)
		if entries[name] != nil && raw == nil {
			l.fail(path, "must be a mapping of %s and clients", strings.Join(quotaKeys, ", "))
			continue
		}
		own := map[string]any{}
		for k, v := range raw {
			if k != "clients" {
				own[k] = v
			}
		}
		q, good := l.quota(path, own)
		u := config.UserQuota{Quota: q, Clients: map[string]config.Quota{}}
		if clients, present := raw["clients"]; present && clients != nil {
			m, ok := clients.(map[string]any)
			if !ok {
				l.fail(path+".clients", "must be a mapping of client-ids to quotas")
				good = false
			}
			for _, client := range slices.Sorted(maps.Keys(m)) {
				cq, ok := l.quota(path+".clients."+client, m[client])
				good = good && ok
				u.Clients[client] = cq
			}
		}
		if good {
			l.cfg.Entities.Users[name] = u
		}
	}
}

func (l *loader) quota(path string, v any) (config.Quota, bool) {
	var q config.Quota
	if v == nil {
		return q, true // an entity listed with no parameters: all from templates
	}
	m, ok := v.(map[string]any)
	if !ok {
		l.fail(path, "must be a mapping of %s", strings.Join(quotaKeys, ", "))
		return q, false
	}
	good := true
	for _, k := range slices.Sorted(maps.Keys(m)) {
		var dst **float64
		switch k {
		case "producer_byte_rate":
			dst = &q.ProducerByteRate
		case "consumer_byte_rate":
			dst = &q.ConsumerByteRate
		case "producer_byte_reservation":
			dst = &q.ProducerByteReservation
		case "consumer_byte_reservation":
			dst = &q.ConsumerByteReservation
		case "produce_latency_objective", "fetch_latency_objective":
			d, ok := l.objective(path+"."+k, m[k])
			if !ok {
				good = false
				continue
			}
			if k == "produce_latency_objective" {
				q.ProduceLatencyObjective = &d
			} else {
				q.FetchLatencyObjective = &d
			}
			continue
		case "quota_weight":
			w, ok := l.positiveWeight(path+".quota_weight", m[k])
			good = good && ok
			q.QuotaWeight = w
			continue
		default:
			l.fail(path+"."+k, "unknown key%s", suggest(k, quotaKeys))
			good = false
			continue
		}
		r, ok := l.rateValue(path+"."+k, m[k])
		good = good && ok
		*dst = r
	}
	good = l.reservationsWithinRates(path, q.ProducerByteReservation, q.ProducerByteRate, q.ConsumerByteReservation, q.ConsumerByteRate) && good
	return q, good
}

// reservationsWithinRates refuses, naming path, a reservation above its
// direction's rate (both set in one entry: a file or a cluster entity).
func (l *loader) reservationsWithinRates(path string, prodRes, prodRate, consRes, consRate *float64) bool {
	good := true
	for _, pair := range []struct {
		res, limit string
		r, lim     *float64
	}{
		{"producer_byte_reservation", "producer_byte_rate", prodRes, prodRate},
		{"consumer_byte_reservation", "consumer_byte_rate", consRes, consRate},
	} {
		if pair.r != nil && pair.lim != nil && *pair.r > *pair.lim {
			l.fail(path, "%s %s exceeds %s %s", pair.res, config.FormatRate(*pair.r), pair.limit, config.FormatRate(*pair.lim))
			good = false
		}
	}
	return good
}

// positiveWeight reads a quota_weight: a number > 0.
func (l *loader) positiveWeight(path string, v any) (*float64, bool) {
	f, err := toFloat(v)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		l.fail(path, "%v must be a number > 0", v)
		return nil, false
	}
	return &f, true
}

// rateValue reads a byte rate (bytes/s, with units) at path.
func (l *loader) rateValue(path string, v any) (*float64, bool) {
	r, err := config.ParseRate(fmt.Sprint(v))
	if err != nil {
		l.fail(path, "%v", err)
		return nil, false
	}
	return &r, true
}

// objective decodes a latency objective, {p99: DURATION}: more than 0 and
// at most the 60 s the latency buckets reach.
func (l *loader) objective(path string, v any) (time.Duration, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 || m["p99"] == nil {
		l.fail(path, "must be {p99: DURATION}, for example {p99: 50ms}")
		return 0, false
	}
	d, err := time.ParseDuration(fmt.Sprint(m["p99"]))
	if err != nil || d <= 0 || d > time.Minute {
		l.fail(path+".p99", "%v: want a duration more than 0 and at most 60s", m["p99"])
		return 0, false
	}
	return d, true
}

// Typed readers over Viper (file value, or SLUICE_… environment override).

func (l *loader) has(key string) bool { return l.v.IsSet(key) }

func (l *loader) str(key string) (string, bool) {
	if !l.has(key) {
		return "", false
	}
	v := l.v.Get(key)
	switch v.(type) {
	case map[string]any, []any:
		l.fail(key, "must be a single value")
		return "", false
	case nil:
		return "", false
	}
	return fmt.Sprint(v), true
}

func (l *loader) stringTo(key string, dst *string) {
	if s, ok := l.str(key); ok {
		*dst = s
	}
}

// list accepts a YAML list or a comma-separated string (from the environment).
func (l *loader) list(key string) ([]any, bool) {
	if !l.has(key) {
		return nil, false
	}
	switch v := l.v.Get(key).(type) {
	case []any:
		return v, true
	case string:
		var out []any
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out, true
	case nil:
		return nil, true
	default:
		return []any{v}, true
	}
}

func (l *loader) strings(key string, dst *[]string) {
	items, ok := l.list(key)
	if !ok {
		return
	}
	*dst = nil
	for i, it := range items {
		s := strings.TrimSpace(fmt.Sprint(it))
		if s == "" {
			l.fail(fmt.Sprintf("%s[%d]", key, i), "must not be empty")
			continue
		}
		*dst = append(*dst, s)
	}
}

func (l *loader) float(key string) (float64, bool) {
	f, err := toFloat(l.v.Get(key))
	if err != nil {
		l.fail(key, "%v", err)
		return 0, false
	}
	return f, true
}

func (l *loader) rate(key string) (float64, bool) {
	r, err := config.ParseRate(fmt.Sprint(l.v.Get(key)))
	if err != nil {
		l.fail(key, "%v", err)
		return 0, false
	}
	return r, true
}

func (l *loader) integer(key string, dst *int, lo, hi int) {
	if !l.has(key) {
		return
	}
	f, ok := l.float(key)
	if !ok {
		return
	}
	if f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		l.fail(key, "%v must be a whole number in [%d, %d]", f, lo, hi)
		return
	}
	*dst = int(f)
}

func (l *loader) duration(key string, dst *time.Duration, least time.Duration) {
	s, ok := l.str(key)
	if !ok {
		return
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		l.fail(key, "%q is not a duration (such as 1s, 200ms, 1h)", s)
		return
	}
	if d < least {
		l.fail(key, "%v is below the minimum %v", d, least)
		return
	}
	*dst = d
}

func (l *loader) boolean(key string, dst *bool) {
	s, ok := l.str(key)
	if !ok {
		return
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		l.fail(key, "%q is not true or false", s)
		return
	}
	*dst = b
}

func toFloat(v any) (float64, error) {
	var f float64
	switch n := v.(type) {
	case int:
		f = float64(n)
	case int64:
		f = float64(n)
	case uint64:
		f = float64(n)
	case float64:
		f = n
	case string:
		var err error
		if f, err = strconv.ParseFloat(strings.TrimSpace(n), 64); err != nil {
			return 0, fmt.Errorf("%q is not a number", n)
		}
	default:
		return 0, fmt.Errorf("%v is not a number", v)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%v is not a finite number", v)
	}
	return f, nil
}

func joinKey(section, k string) string {
	if section == "" {
		return k
	}
	return section + "." + k
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest names the closest valid key when a key looks misspelt.
func suggest(k string, valid []string) string {
	best, bestDist := "", 4
	for _, v := range valid {
		if d := editDistance(k, v); d < bestDist {
			best, bestDist = v, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
