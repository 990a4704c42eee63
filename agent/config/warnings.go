package config

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Warnings lists what is valid but probably not what the operator wants,
// each naming its key: configured limits under their direction's
// min_limit, and a client named "default". Such a limit wins over the floor
// (an explicit cap is the operator's to set), so a client held to it may
// not finish Kafka's largest default request inside its request timeout and
// would retry for ever.
func (c Config) Warnings() Problems {
	var out Problems
	peers := 0
	for name := range c.Entities.Peers {
		if name != DefaultKey {
			peers++
		}
	}
	tls := c.TLSListeners()
	for i, port := range c.Listeners {
		name := strconv.Itoa(int(port))
		if IsTLS(c.Protocol(port)) && peers == 0 && c.Entities.Listeners[name] == (Quota{}) && c.Entities.Listeners[DefaultKey] == (Quota{}) {
			out = append(out, Problem{Key: fmt.Sprintf("listeners[%d]", i),
				Message: fmt.Sprintf("port %d is %s: its requests are encrypted, so every connection on it shares the entity listener:%d, with the global defaults (no reservation, weight 1, no limit): set entities.peers or entities.listeners.%d", port, c.Protocol(port), port, port)})
		}
	}
	if peers > 0 && len(tls) == 0 {
		out = append(out, Problem{Key: "entities.peers",
			Message: "peers attribute connections on SSL and SASL_SSL listeners only, and none is configured: no connection will match a peer"})
	}
	if len(c.Entities.Users) > 0 && !slices.ContainsFunc(c.Listeners, func(p uint16) bool { return c.Protocol(p) == ProtocolSASLPlaintext }) {
		out = append(out, Problem{Key: "entities.users",
			Message: "users are read only on SASL_PLAINTEXT listeners, and none is configured: no connection will match a user"})
	}
	if len(c.ExemptPeers) == 0 && c.Mode == ModeEnforce {
		msg := "is empty: replication from the other brokers and controllers is governed like any client; list their addresses"
		if c.Cluster.Enabled {
			msg += " (and the cluster budgets' reports between the brokers' agents would be governed too)"
		}
		out = append(out, Problem{Key: "exempt_peers", Message: msg})
	}
	for _, b := range c.Cluster.Budgets() {
		if len(b.Topics) == 0 && b.Reservation > 0 {
			out = append(out, Problem{Key: "cluster.entities." + map[string]string{ClusterKindClient: "clients", ClusterKindUser: "users"}[b.Kind] + "." + b.Name + ".topics",
				Message: "is empty: the reservation is spread evenly over the brokers, not by where the tenant's partitions lead"})
		}
	}
	if _, ok := c.Entities.Clients[OldDefaultKey]; ok {
		out = append(out, Problem{Key: "entities.clients." + OldDefaultKey,
			Message: fmt.Sprintf("configures the client-id %q only; the template for every client is spelled %q, as Kafka spells it", OldDefaultKey, DefaultKey)})
	}
	check := func(section string, quotas map[string]Quota) {
		names := make([]string, 0, len(quotas))
		for name := range quotas {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			q := quotas[name]
			for _, l := range []struct {
				key     string
				limit   *float64
				dir     Direction
				dirName string
				largest float64
				what    string
			}{
				{"producer_byte_rate", q.ProducerByteRate, c.Produce, "produce", KafkaMaxRequestSize, "max.request.size"},
				{"consumer_byte_rate", q.ConsumerByteRate, c.Fetch, "fetch", KafkaFetchMaxBytes, "fetch.max.bytes"},
			} {
				if l.limit == nil || !l.dir.Enabled() || *l.limit >= l.dir.MinLimit {
					continue
				}
				msg := fmt.Sprintf("%s is under %s.min_limit %s: the configured limit wins", FormatRate(*l.limit), l.dirName, FormatRate(l.dir.MinLimit))
				if *l.limit > 0 {
					took := time.Duration(l.largest / *l.limit * float64(time.Second)).Round(100 * time.Millisecond)
					msg += fmt.Sprintf(", and Kafka's default largest request (%s %s) takes %v of its default %v request timeout", l.what, FormatRate(l.largest), took, KafkaRequestTimeout)
				}
				out = append(out, Problem{Key: fmt.Sprintf("entities.%s.%s.%s", section, name, l.key), Message: msg})
			}
		}
	}
	check("clients", c.Entities.Clients)
	check("topic-partitions", c.Entities.TopicPartitions)
	check("peers", c.Entities.Peers)
	check("listeners", c.Entities.Listeners)
	return out
}

// OldDefaultKey is how sluice spelled the template before it took Kafka's
// spelling: now an ordinary name, which an old configuration may still use.
const OldDefaultKey = "default"
