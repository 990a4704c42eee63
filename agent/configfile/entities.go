package configfile

import (
	"fmt"
	"maps"
	"math"
	"net/netip"
	pathpkg "path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
)

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
