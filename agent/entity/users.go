package entity

import (
	"net/url"
	"strings"

	"github.com/sluice-dev/sluice/agent/config"
)

// userEntry is one user's entries in one store, the file or Kafka (or
// the users <default> template's).
type userEntry struct {
	own     config.Quota
	clients map[string]config.Quota // by SafeName(client-id)
	// clientDefault: the user's clients <default> template, if set.
	clientDefault *config.Quota
	// hasOwn: the user's own entry is a quota level (KIP-55's /users/<u>).
	// In the file: it sets a parameter, or it lists no clients at all; in
	// Kafka: it sets a rate.
	hasOwn bool
}

// ownLevel reports whether the user's own entry is a quota level (nil: no entry).
func (u *userEntry) ownLevel() bool { return u != nil && u.hasOwn }

// namesClient reports whether the entry has a level for the client:
// /users/<u>/clients/<c> or /users/<u>/clients/<default>.
func (u *userEntry) namesClient(c string) bool {
	if u == nil {
		return false
	}
	_, ok := u.clients[c]
	return ok || u.clientDefault != nil
}

// userStores are one user's entries in the file and in Kafka.
type userStores struct{ file, kafka *userEntry }

// mayNameLongClient reports whether a client-id of which only the first
// kept bytes are known could have a level here: a clients <default>, or a
// configured client-id longer than kept.
func (s userStores) mayNameLongClient(kept int) bool {
	for _, u := range []*userEntry{s.file, s.kafka} {
		if u == nil {
			continue
		}
		if u.clientDefault != nil {
			return true
		}
		for name := range u.clients {
			if len(name) > kept {
				return true
			}
		}
	}
	return false
}

func (s userStores) namesClient(c string) bool {
	return s.file.namesClient(c) || s.kafka.namesClient(c)
}
func (s userStores) ownLevel() bool { return s.file.ownLevel() || s.kafka.ownLevel() }

// compileUsers compiles the file's users (fromKafka false) or those read
// from the cluster's quota store.
func compileUsers(users map[string]config.UserQuota, fromKafka bool) (map[string]*userEntry, *userEntry) {
	out := make(map[string]*userEntry, len(users))
	var template *userEntry
	for name, u := range users {
		e := &userEntry{own: u.Quota, clients: map[string]config.Quota{}}
		for client, q := range u.Clients {
			if client == config.DefaultKey {
				q := q
				e.clientDefault = &q
				continue
			}
			e.clients[SafeName(client)] = q
		}
		e.hasOwn = e.own != (config.Quota{}) || (!fromKafka && len(e.clients) == 0 && e.clientDefault == nil)
		if name == config.DefaultKey {
			template = e
			continue
		}
		out[SafeName(name)] = e
	}
	return out, template
}

// UserClientName names a <user, client-id> entity: the user's name with
// '/' (and other reserved bytes) escaped, '/', then the client-id's
// SafeName, through SafeName again for length. The user part never holds a
// '/', so no client-id can make its name equal another user's entity.
func UserClientName(user, clientID string) string {
	return SafeName(url.PathEscape(SafeName(user)) + "/" + SafeName(clientID))
}

// splitUserClient undoes UserClientName (false for a rewritten name).
func splitUserClient(name string) (user, client string, ok bool) {
	i := strings.IndexByte(name, '/')
	if i < 0 {
		return "", "", false
	}
	u, err := url.PathUnescape(name[:i])
	if err != nil {
		return "", "", false
	}
	return u, name[i+1:], true
}

// Entity returns the entity of a request from clientID on a connection
// authenticated as user ("" when no principal is known), in KIP-55's
// order: /users/<u>/clients/<c>, /users/<u>/clients/<default>,
// /users/<u>, /users/<default>/clients/<c>,
// /users/<default>/clients/<default>, /users/<default>, then the client
// levels (Client). Configured topic-partitions come before all of these
// (the learner's resolve). The first level configured decides the entity:
// levels that name a client give each <user, client-id> its own entity,
// levels that name only a user give the user one entity for all its
// clients.
func (p *Policy) Entity(user, clientID string) Key {
	if user == "" {
		return p.Client(clientID)
	}
	u, c := SafeName(user), SafeName(clientID)
	for _, level := range []userStores{p.user(u), p.userDefaults()} {
		if level.namesClient(c) {
			return Key{Kind: KindUserClient, Name: UserClientName(user, clientID)}
		}
		if level.ownLevel() {
			return Key{Kind: KindUser, Name: u}
		}
	}
	return p.Client(clientID)
}

// user and userDefaults are a user's entries, and the users <default>
// ones, in both stores.
func (p *Policy) user(u string) userStores { return userStores{p.users[u], p.kafkaUsers[u]} }
func (p *Policy) userDefaults() userStores {
	return userStores{p.userTemplate, p.kafkaUserTemplate}
}

// userLevels lists, most specific first, the entries a user or
// <user, client-id> entity's parameters come from, each with its source:
// KIP-55's levels in order, and at each level the file before Kafka (the
// file is the only place that sets reservations and weights).
func (p *Policy) userLevels(k Key) []level {
	var out []level
	add := func(q *config.Quota, src Source) {
		if q != nil {
			out = append(out, level{*q, src})
		}
	}
	own := func(e *userEntry, src Source) {
		if e != nil {
			add(&e.own, src)
		}
	}
	clientOf := func(e *userEntry, c string, src Source) {
		if e == nil {
			return
		}
		if q, ok := e.clients[c]; ok {
			add(&q, src)
		}
	}
	clientDefault := func(e *userEntry, src Source) {
		if e != nil {
			add(e.clientDefault, src)
		}
	}
	defaults := p.userDefaults()
	switch k.Kind {
	case KindUser:
		mine := p.user(k.Name)
		own(mine.file, SourceFile)
		own(mine.kafka, SourceKafka)
		own(defaults.file, SourceTemplate)
		own(defaults.kafka, SourceKafkaDefault)
	case KindUserClient:
		user, client, ok := splitUserClient(k.Name)
		if ok {
			mine := p.user(user)
			clientOf(mine.file, client, SourceFile)
			clientOf(mine.kafka, client, SourceKafka)
			clientDefault(mine.file, SourceTemplate)
			clientDefault(mine.kafka, SourceKafkaDefault)
			clientOf(defaults.file, client, SourceTemplate)
			clientOf(defaults.kafka, client, SourceKafkaDefault)
		}
		clientDefault(defaults.file, SourceTemplate)
		clientDefault(defaults.kafka, SourceKafkaDefault)
	}
	return out
}

// userKeys lists the users and <user, client-id> entities the file or
// Kafka's quota store names, each once.
func (p *Policy) userKeys(stores ...map[string]config.UserQuota) []Key {
	seen := map[Key]bool{}
	var keys []Key
	add := func(k Key) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for _, cfg := range stores {
		for name, u := range cfg {
			if name == config.DefaultKey {
				continue
			}
			if p.user(SafeName(name)).ownLevel() {
				add(Key{Kind: KindUser, Name: SafeName(name)})
			}
			for client := range u.Clients {
				if client != config.DefaultKey {
					add(Key{Kind: KindUserClient, Name: UserClientName(name, client)})
				}
			}
		}
	}
	return keys
}
