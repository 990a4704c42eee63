package entity

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/agent/config"
)

// MaxNameBytes bounds an entity name: client-ids are chosen by clients (a
// Kafka client-id may be 32 KiB of anything) and become metric labels,
// status lines and pinned names (at most 254 bytes).
const MaxNameBytes = 200

// hashSuffixLen is the hex digits of SHA-256 that keep two rewritten names
// apart: 48 bits, so two different client-ids do not meet by chance.
const hashSuffixLen = 12

// SafeName returns a client-chosen string as an entity name: unchanged
// when it is valid UTF-8 of printable characters within MaxNameBytes;
// otherwise with invalid bytes and non-printable characters escaped (Go
// quoting, as \xff, \x00, \x1b), cut to fit, and suffixed with "~" and a
// hash of the original, so that distinct strings stay distinct entities and
// no rewritten name can equal an ordinary one that lacks the suffix.
func SafeName(raw string) string {
	if len(raw) <= MaxNameBytes && printable(raw) {
		return raw
	}
	quoted := strconv.Quote(raw)
	escaped := quoted[1 : len(quoted)-1]
	sum := sha256.Sum256([]byte(raw))
	suffix := "~" + hex.EncodeToString(sum[:])[:hashSuffixLen]
	if room := MaxNameBytes - len(suffix); len(escaped) > room {
		escaped = escaped[:room]
		// Never end inside an escape sequence or a multi-byte character.
		if i := strings.LastIndexByte(escaped, '\\'); i >= 0 && i >= room-10 {
			escaped = escaped[:i]
		}
		for len(escaped) > 0 && !utf8.ValidString(escaped) {
			escaped = escaped[:len(escaped)-1]
		}
	}
	return escaped + suffix
}

func printable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return false
		}
	}
	return utf8.ValidString(s)
}

// Client-ids longer than a sample keeps. The data path keeps a long
// client-id's first LongClientKept bytes and, in place of the rest, their
// hash (bpf/kafka.h; LongClientHash is its twin), so that client-ids that
// share their first bytes keep entities of their own.
const (
	// LongClientKept is how many of a long client-id's bytes a sample
	// keeps (CLIENT_ID_KEPT in bpf/types.h).
	LongClientKept = 128
	// LongClientHashBytes is the hash's size in a sample
	// (CLIENT_ID_HASH_BYTES): client-ids of up to LongClientKept +
	// LongClientHashBytes bytes are sampled whole.
	LongClientHashBytes = 8
)

const (
	longHashSeed = 0x736c756963652d31
	longHashMul  = 0x9e3779b97f4a7c15
)

// longMix is one step of LongClientHash: a bijection of h for each w, so
// two client-ids of one length that differ in one word never meet.
func longMix(h, w uint64) uint64 {
	h = (h ^ w) * longHashMul
	return h ^ h>>32
}

// LongClientHash is the data path's hash of a long client-id's bytes past
// its first LongClientKept (tail): its 8-byte little-endian words mixed in
// turn, then its last bytes with their count, then its length. It is not
// a cryptographic hash: a client that finds a client-id with another's
// hash shares that client's entity, which any client can do more simply
// by naming itself as the other does.
func LongClientHash(tail []byte) uint64 {
	n := len(tail)
	h := uint64(longHashSeed)
	for len(tail) >= 8 {
		h = longMix(h, binary.LittleEndian.Uint64(tail))
		tail = tail[8:]
	}
	var last uint64
	for i, b := range tail {
		last |= uint64(b) << (8 * i)
	}
	h = longMix(h, last|uint64(len(tail))<<56)
	return longMix(h, uint64(n))
}

// LongClientID is the client-id a long one goes by, from its first
// LongClientKept bytes (prefix) and the hash of the rest: the prefix, an
// ellipsis and the hash in hex. Printable prefixes make names of 147
// bytes, within MaxNameBytes; others are SafeName's to rewrite, as any
// client-id. Another client may name itself so: it then shares the long
// one's entity, as it could by sending the long client-id itself.
func LongClientID(prefix string, hash uint64) string {
	return prefix + "…" + fmt.Sprintf("%016x", hash)
}

// LongClients resolves long client-ids (those the data path cut) under one
// policy: Policy.LongClients builds it once, keeping only what a long
// client-id is compared with (configured client-ids that may be long, the
// literal starts of client patterns), so that a sample costs the same
// however many client-ids are configured. Immutable, as the policy.
type LongClients struct {
	p *Policy
	// clients: the client levels' candidates (the file's, then Kafka's);
	// users: each user entry's. A candidate is a configured client-id (by
	// SafeName) that may be a long one: longer than what a sample keeps,
	// or rewritten by SafeName (its length unknown).
	clients [2][]string
	users   map[*userEntry][]string
	// patterns: the client patterns' literal starts (before a wildcard).
	patterns []string
}

// LongClients returns the policy's resolver of long client-ids.
func (p *Policy) LongClients() *LongClients {
	lc := &LongClients{p: p, users: map[*userEntry][]string{}}
	for i, m := range []map[string]config.Quota{p.clients, p.kafka} {
		lc.clients[i] = longCandidates(m)
	}
	for _, store := range []map[string]*userEntry{p.users, p.kafkaUsers} {
		for _, e := range store {
			lc.users[e] = longCandidates(e.clients)
		}
	}
	for _, e := range []*userEntry{p.userTemplate, p.kafkaUserTemplate} {
		if e != nil {
			lc.users[e] = longCandidates(e.clients)
		}
	}
	for _, pt := range p.patterns {
		lit := pt.glob
		if i := strings.IndexAny(lit, `*?[\`); i >= 0 {
			lit = lit[:i]
		}
		lc.patterns = append(lc.patterns, lit)
	}
	return lc
}

// longCandidates lists the names that may be a long client-id's.
func longCandidates(names map[string]config.Quota) []string {
	var out []string
	for name := range names {
		if _, rewritten := rewrittenHead(name); rewritten || len(name) > LongClientKept+LongClientHashBytes {
			out = append(out, name)
		}
	}
	return out
}

// EntityOfLongClient is LongClients().Entity, for one look-up.
func (p *Policy) EntityOfLongClient(user, prefix string, hash uint64) (Key, bool) {
	return p.LongClients().Entity(user, prefix, hash)
}

// Entity is Policy.Entity for a client-id the data path cut: prefix is
// its first LongClientKept bytes and hash LongClientHash of the rest. The
// client-id goes by LongClientID(prefix, hash) wherever that gives it the
// entity the whole client-id would get: a level with a clients <default>
// gives it a <user, client-id> entity of its own, the clients <default>
// template a client entity of its own; a configured client-id that is it
// is found by its hash. ok is false where the entity may hang on bytes the
// sample did not keep: a configured client-id (the file's or Kafka's, of
// the user levels or the client levels) that may be this one but whose
// whole name is not known (SafeName rewrote it), or a client pattern that
// the kept bytes do not rule out (its literal start agrees with them: its
// * stops at a '/' the cut bytes may hold, and SafeName rewrites a
// client-id by its every byte).
func (lc *LongClients) Entity(user, prefix string, hash uint64) (Key, bool) {
	p := lc.p
	pf := newPrefixForms(prefix)
	id := LongClientID(prefix, hash)
	if user != "" {
		u := SafeName(user)
		for _, level := range []userStores{p.user(u), p.userDefaults()} {
			for _, e := range []*userEntry{level.file, level.kafka} {
				if e == nil {
					continue
				}
				switch name, m := longMatch(lc.users[e], pf, hash); m {
				case longIs:
					return Key{Kind: KindUserClient, Name: UserClientName(user, name)}, true
				case longMayBe:
					return Key{}, false
				}
			}
			if level.namesClient(SafeName(id)) {
				return Key{Kind: KindUserClient, Name: UserClientName(user, id)}, true
			}
			if level.ownLevel() {
				return Key{Kind: KindUser, Name: u}, true
			}
		}
	}
	for _, names := range lc.clients {
		switch name, m := longMatch(names, pf, hash); m {
		case longIs:
			return Key{Kind: KindClient, Name: name}, true
		case longMayBe:
			return Key{}, false
		}
	}
	for _, lit := range lc.patterns {
		if pf.agrees(lit) {
			return Key{}, false
		}
	}
	return Key{Kind: KindClient, Name: SafeName(id)}, true
}

// How a configured client-id compares with a long one known by its
// prefix and hash.
type longMatchKind uint8

const (
	longNot   longMatchKind = iota
	longIs                  // the configured client-id is the long one
	longMayBe               // it may be: SafeName rewrote it, and its start agrees
)

// longMatch compares candidate configured client-ids (by SafeName) with a
// long client-id.
func longMatch(names []string, pf prefixForms, hash uint64) (string, longMatchKind) {
	maybe := ""
	for _, name := range names {
		if len(name) > LongClientKept+LongClientHashBytes && name[:LongClientKept] == pf.raw &&
			LongClientHash([]byte(name[LongClientKept:])) == hash {
			return name, longIs
		}
		if head, ok := rewrittenHead(name); ok && pf.agrees(head) {
			maybe = name
		}
	}
	if maybe != "" {
		return maybe, longMayBe
	}
	return "", longNot
}

// rewrittenHead is the escaped start of a name SafeName may have
// rewritten: one that ends in its "~" and hash suffix.
func rewrittenHead(name string) (string, bool) {
	i := len(name) - hashSuffixLen - 1
	if i < 0 || name[i] != '~' {
		return "", false
	}
	for _, c := range name[i+1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", false
		}
	}
	return name[:i], true
}

// prefixForms are the ways a client-id that begins with a prefix can
// begin once SafeName has named it: as it is, or escaped (up to its last
// whole character: a cut inside a character escapes otherwise than the
// whole client-id does).
type prefixForms struct{ raw, whole, quoted string }

func newPrefixForms(prefix string) prefixForms {
	whole := prefix
	for len(whole) > 0 && !utf8.ValidString(whole) {
		whole = whole[:len(whole)-1]
	}
	q := strconv.Quote(whole)
	return prefixForms{raw: prefix, whole: whole, quoted: q[1 : len(q)-1]}
}

// agrees reports whether a name's start (head) can begin the name of a
// client-id that begins with the prefix: one of the two begins the other.
func (pf prefixForms) agrees(head string) bool {
	for _, p := range []string{pf.whole, pf.quoted} {
		if strings.HasPrefix(head, p) || strings.HasPrefix(p, head) {
			return true
		}
	}
	return false
}
