package configfile

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	pathpkg "path"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/exporter-toolkit/web"

	"github.com/sluice-dev/sluice/agent/config"
)

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
