// Package kafka is the one place that knows the Kafka wire protocol: it reads
// the request prefixes the data path samples (the first bytes of a request,
// from its size field on) into the facts the learner needs: API key, version,
// client-id, and for Produce and Fetch the topics and partitions, fetch
// session, forgotten topics and replica identity; for SASL, the mechanism
// and the principal a PLAIN or SCRAM first message names (never the
// secret beside it).
//
// Samples are usually truncated (a Produce request's records run far past
// the sample), so the body is walked field by field with franz-go's kbin
// reader and everything reached before the bytes ran out is kept; kmsg
// supplies the version table, and is the oracle the tests compare against.
// Array counts are never trusted for allocation: the walk appends only what
// the bytes actually contain.
package kafka

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// API keys the learner reads bodies of.
const (
	KeyProduce     int16 = 0
	KeyFetch       int16 = 1
	KeyApiVersions int16 = 18
	// ShareFetch (KIP-932) carries a share group's records: its bytes are
	// attributed as Fetch's are.
	KeyShareFetch int16 = 78
)

// MaxRequestSize bounds the size field: Kafka's socket.request.max.bytes
// defaults to 100 MiB; a larger value is not a Kafka request.
const MaxRequestSize = 100 << 20

var (
	// ErrMalformed: the bytes cannot be a Kafka request (bad size, negative
	// length where none is allowed, a complete request that ends early).
	ErrMalformed = errors.New("malformed kafka request")
	// ErrUnknownAPI: an API key or version this build of kmsg does not know.
	ErrUnknownAPI = errors.New("unknown kafka api key or version")
)

// TopicPartitions names a topic (by name, or by ID from Produce and Fetch
// v13) and the partitions a request lists for it, in request order.
type TopicPartitions struct {
	Name       string
	ID         [16]byte
	Partitions []int32
	// Hidden: the sample ended before this topic's partition list did, so
	// it names more partitions than Partitions holds.
	Hidden bool
}

// Request is what a sample says about one request. A Parser reuses one
// Request's slices from sample to sample.
type Request struct {
	// Size is the request's size field: the bytes after it.
	Size          int32
	APIKey        int16
	Version       int16
	CorrelationID int32
	ClientID      string
	// Topics lists the Produce or Fetch topics reached, in request order.
	Topics []TopicPartitions
	// TopicsHidden: the sample ended before the request's topic list did,
	// so whole topics after Topics (or every topic) went unseen. A topic
	// cut part-way is Topics' last, marked Hidden.
	TopicsHidden bool

	// Fetch only. ReplicaID is the body's replica id (v0–14) or the
	// ReplicaState tagged field's (v15+); -1 for consumers and when absent.
	ReplicaID    int32
	SessionID    int32
	SessionEpoch int32
	Forgotten    []TopicPartitions

	// SaslHandshake only: the mechanism, one of the Mechanism… constants.
	Mechanism string
	// SaslAuthenticate only: the principal a PLAIN message or a SCRAM
	// client-first message names, and which of the two it was. The rest
	// of the message (password, nonce, proof) is never kept.
	Principal       string
	PrincipalFormat PrincipalFormat

	// HeaderComplete: the header, client-id included, was read. When it is
	// false only Size (and perhaps APIKey) mean anything.
	HeaderComplete bool
	// Truncated: the sample ended before the fields walked did. What was
	// reached is still here; nothing that was read is thrown away.
	Truncated bool
}

// IsFollowerFetch reports a replica's fetch, which is never governed: a
// replica id ≥ 0 in the body (before v15) or the ReplicaState tagged field
// (v15+), or, as a hint for truncated samples, a broker fetcher's client-id.
func (r *Request) IsFollowerFetch() bool {
	return r.APIKey == KeyFetch && (r.ReplicaID >= 0 || IsBrokerFetcherClientID(r.ClientID))
}

var brokerFetcher = regexp.MustCompile(`^broker-[0-9]+-fetcher-[0-9]+$`)

// IsBrokerFetcherClientID matches the client-id of Kafka's replica fetcher
// threads, `broker-<id>-fetcher-<n>`.
func IsBrokerFetcherClientID(clientID string) bool {
	return len(clientID) > len("broker--fetcher-") && clientID[0] == 'b' && brokerFetcher.MatchString(clientID)
}

// apiInfo is what the header parser needs of every API: the highest version
// kmsg knows and the first flexible version (header v2 from there on).
type apiInfo struct {
	known        bool
	maxVersion   int16
	flexibleFrom int16 // -1: never flexible
}

// apis is built once from kmsg so that the hot path allocates nothing.
var apis = func() (t [256]apiInfo) {
	for key := range t {
		req := kmsg.RequestForKey(int16(key))
		if req == nil {
			continue
		}
		info := apiInfo{known: true, maxVersion: req.MaxVersion(), flexibleFrom: -1}
		for v := int16(0); v <= info.maxVersion; v++ {
			req.SetVersion(v)
			if req.IsFlexible() {
				info.flexibleFrom = v
				break
			}
		}
		t[key] = info
	}
	return t
}()

// Parser reads samples. It interns topic names and client-ids so that a
// warm parser allocates nothing per sample. Not safe for concurrent use.
type Parser struct {
	strings map[string]string
}

// maxInterned bounds the intern table; client-ids come from the network.
const maxInterned = 1 << 16

// NewParser returns a Parser.
func NewParser() *Parser { return &Parser{strings: make(map[string]string)} }

func (p *Parser) intern(b []byte) string {
	if s, ok := p.strings[string(b)]; ok {
		return s
	}
	if len(p.strings) >= maxInterned {
		clear(p.strings)
	}
	s := string(b)
	p.strings[s] = s
	return s
}

// Parse reads sample (a request's first bytes, from the size field on) into
// r. It returns ErrMalformed or ErrUnknownAPI (wrapped, with detail) when
// the bytes cannot be this request; r.Truncated reports a sample that ended
// early, which is not an error. Header fields are set even when the body
// cannot be read.
func (p *Parser) Parse(sample []byte, r *Request) error {
	*r = Request{Topics: r.Topics[:0], Forgotten: r.Forgotten[:0], ReplicaID: -1}
	if len(sample) < 4 {
		r.Truncated = true
		return nil
	}
	b := kbin.Reader{Src: sample}
	r.Size = b.Int32()
	if r.Size < 8 || r.Size > MaxRequestSize {
		return fmt.Errorf("%w: size field %d outside [8, %d]", ErrMalformed, r.Size, MaxRequestSize)
	}
	complete := len(b.Src) >= int(r.Size)
	if complete {
		b.Src = b.Src[:r.Size] // bytes past the request belong to the next one
	}
	w := walker{b: b, complete: complete}
	err := p.parse(&w, r)
	r.Truncated = w.truncated
	return err
}

// walker wraps the kbin reader with what running out of bytes means: the
// end of the sample (truncation) or, in a complete request, malformation.
type walker struct {
	b         kbin.Reader
	complete  bool
	truncated bool
	flexible  bool
}

// stop reports whether the reader ran out; it records why.
func (w *walker) stop() bool {
	if w.b.Ok() {
		return false
	}
	if !w.complete {
		w.truncated = true
	}
	return true
}

// ended returns the error for a walk that stopped early.
func (w *walker) ended(what string) error {
	if w.complete {
		return fmt.Errorf("%w: request ends inside %s", ErrMalformed, what)
	}
	return nil
}

// count reads an array length (compact in flexible versions). A null or
// negative count reads as 0 with ok false when it is not allowed.
func (w *walker) count() (n int, ok bool) {
	if w.flexible {
		u := w.b.Uvarint()
		if u == 0 {
			return 0, false // null compact array
		}
		return int(u - 1), true
	}
	v := w.b.Int32()
	return int(v), v >= 0
}

// str reads a string (compact in flexible versions) without copying.
func (w *walker) str() ([]byte, bool) {
	var n int
	if w.flexible {
		u := w.b.Uvarint()
		if u == 0 {
			return nil, false
		}
		n = int(u - 1)
	} else {
		n = int(w.b.Int16())
		if n < 0 {
			return nil, false
		}
	}
	return w.b.Span(n), true
}

// nullableBytes skips a nullable bytes field, returning false if it did not fit.
func (w *walker) skipNullableBytes() {
	var n int
	if w.flexible {
		n = int(w.b.Uvarint()) - 1
	} else {
		n = int(w.b.Int32())
	}
	if n > 0 {
		w.b.Span(n)
	}
}

// skipTags skips a tagged-field section. (kmsg.SkipTags does the same but
// takes an interface, which would move the reader to the heap per sample.)
func (w *walker) skipTags() {
	if !w.flexible {
		return
	}
	for n := w.b.Uvarint(); n > 0 && w.b.Ok(); n-- {
		w.b.Uvarint() // tag
		w.b.Span(int(w.b.Uvarint()))
	}
}

func (p *Parser) parse(w *walker, r *Request) error {
	b := &w.b
	r.APIKey = b.Int16()
	r.Version = b.Int16()
	r.CorrelationID = b.Int32()
	// The client-id is a nullable int16-length string in every header version.
	n := b.Int16()
	if w.stop() {
		return w.ended("the request header")
	}
	if n > 0 {
		id := b.Span(int(n))
		if w.stop() {
			return w.ended("the client-id")
		}
		r.ClientID = p.intern(id)
	}
	r.HeaderComplete = true
	if r.APIKey < 0 || int(r.APIKey) >= len(apis) || !apis[r.APIKey].known {
		return fmt.Errorf("%w: api key %d", ErrUnknownAPI, r.APIKey)
	}
	info := apis[r.APIKey]
	if r.Version < 0 || r.Version > info.maxVersion {
		return fmt.Errorf("%w: %s v%d (this build knows v0–v%d)", ErrUnknownAPI, kmsg.NameForKey(r.APIKey), r.Version, info.maxVersion)
	}
	w.flexible = info.flexibleFrom >= 0 && r.Version >= info.flexibleFrom
	if w.flexible {
		w.skipTags() // request header v2
		if w.stop() {
			return w.ended("the header's tagged fields")
		}
	}
	switch r.APIKey {
	case KeyProduce:
		return p.produce(w, r)
	case KeyFetch:
		return p.fetch(w, r)
	case KeyShareFetch:
		return p.shareFetch(w, r)
	case KeySaslHandshake:
		return p.saslHandshake(w, r)
	case KeySaslAuthenticate:
		return p.saslAuthenticate(w, r)
	}
	return nil
}

// APIName names a request's API key as Kafka does ("Produce", "Fetch",
// "SaslAuthenticate"), or "Unknown".
func APIName(key int16) string { return kmsg.NameForKey(key) }
