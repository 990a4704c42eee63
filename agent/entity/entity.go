// Package entity is the vocabulary of quota entities: directions, kinds,
// keys and parameters; the Policy that decides which entity a request
// belongs to and with which parameters (docs/design.md §5); and the Registry that
// gives entities the dense ids the data path indexes by.
package entity

import "math"

// Direction is produce (bytes the broker receives) or fetch (bytes it sends).
type Direction uint8

const (
	Produce Direction = iota
	Fetch
)

// Directions lists both, in index order.
var Directions = [...]Direction{Produce, Fetch}

// Other is the opposite direction.
func (d Direction) Other() Direction { return 1 - d }

func (d Direction) String() string {
	if d == Produce {
		return "produce"
	}
	return "fetch"
}

// Kind is an entity's type.
type Kind uint8

const (
	// KindUnknown is the per-direction entity for bytes not attributed yet.
	KindUnknown Kind = iota
	// KindOverflow takes new entities once the registry is full.
	KindOverflow
	// KindClient is a client-id: configured, or a fallback entity with the
	// clients <default> template's parameters.
	KindClient
	// KindTopicPartition is a configured topic-partition.
	KindTopicPartition
	// KindClientPattern is a configured glob of client-ids
	// (consumer-orders-*): every client-id it matches shares this entity.
	KindClientPattern
	// KindUser is an authenticated principal (SASL_PLAINTEXT listeners):
	// every client of the user shares it.
	KindUser
	// KindUserClient is one client-id of one user (<user, client-id>,
	// KIP-55); its name is UserClientName's.
	KindUserClient
	// KindPeer is a configured peer prefix (entities.peers): on TLS
	// listeners every connection from it shares this entity.
	KindPeer
	// KindListener is a TLS listener's entity (named by its port): its
	// connections that no peer prefix holds.
	KindListener
	// KindUnresolved takes requests whose entity their sample cannot tell
	// (a client-id too long to sample whole where the client-id decides,
	// a request cut before its topics): one entity held to the most
	// restrictive limits configured, so no length escapes a limit.
	KindUnresolved
)

// UnresolvedKey is the one unresolved entity.
var UnresolvedKey = Key{Kind: KindUnresolved, Name: "unresolved"}

func (k Kind) String() string {
	switch k {
	case KindUnknown:
		return "unknown"
	case KindOverflow:
		return "overflow"
	case KindClient:
		return "client"
	case KindClientPattern:
		return "client-pattern"
	case KindUser:
		return "user"
	case KindUserClient:
		return "user-client"
	case KindPeer:
		return "peer"
	case KindListener:
		return "listener"
	case KindUnresolved:
		return "unresolved"
	default:
		return "topic-partition"
	}
}

// Key identifies an entity: its kind and name (a client-id, or
// "<topic>-<partition>").
type Key struct {
	Kind Kind
	Name string
}

func (k Key) String() string { return k.Kind.String() + ":" + k.Name }

// Params are the three numbers of an entity in one direction, resolved.
type Params struct {
	Reservation float64 // bytes/s, ≤ Limit
	Weight      float64 // > 0
	Limit       float64 // bytes/s; +Inf when unlimited
}

// Global defaults when neither the entity nor its type's template says.
var globalDefaults = Params{Reservation: 0, Weight: 1, Limit: math.Inf(1)}
