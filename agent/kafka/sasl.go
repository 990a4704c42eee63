package kafka

import (
	"bytes"
	"fmt"
)

// SASL API keys: the handshake names the mechanism, then SaslAuthenticate
// carries the mechanism's messages (KIP-152; clients that predate it send
// raw tokens after a v0 handshake, which are not Kafka requests and fail
// to parse).
const (
	KeySaslHandshake    int16 = 17
	KeySaslAuthenticate int16 = 36
)

// SASL mechanisms whose first message names the principal in clear. Any
// other mechanism is kept as MechanismOther: its name is the client's
// choice, so it is never stored as sent.
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
	MechanismOther       = "other"
)

// PrincipalFormat says which mechanism's message a principal was read from.
type PrincipalFormat uint8

const (
	// NoPrincipal: the request names none (or not one this parser reads).
	NoPrincipal PrincipalFormat = iota
	// PrincipalPlain: PLAIN's message (RFC 4616) authzid NUL authcid NUL
	// passwd; the principal is the authentication identity, authcid (Kafka
	// refuses an authzid that differs from it).
	PrincipalPlain
	// PrincipalScram: SCRAM's client-first message (RFC 5802)
	// gs2-header n=username,r=nonce; the principal is the username.
	PrincipalScram
)

// maxPrincipal bounds a principal's length: Kafka's own user names are
// short, and a longer one is a client's invention.
const maxPrincipal = 255

// saslHandshake reads the mechanism name (v0 and v1 have the same body).
func (p *Parser) saslHandshake(w *walker, r *Request) error {
	mech, ok := w.str()
	if w.stop() {
		return w.ended("the SASL mechanism")
	}
	if !ok {
		return fmt.Errorf("%w: SaslHandshake mechanism is null", ErrMalformed)
	}
	switch string(mech) {
	case MechanismPlain:
		r.Mechanism = MechanismPlain
	case MechanismScramSHA256:
		r.Mechanism = MechanismScramSHA256
	case MechanismScramSHA512:
		r.Mechanism = MechanismScramSHA512
	default:
		r.Mechanism = MechanismOther
	}
	return nil
}

// saslAuthenticate reads the principal from a PLAIN message or a SCRAM
// client-first message, and nothing else: the password, nonces and proofs
// are never copied out of the sample. A message cut before the principal
// ends names none.
func (p *Parser) saslAuthenticate(w *walker, r *Request) error {
	b := &w.b
	var n int
	if w.flexible { // v2: compact bytes
		n = int(b.Uvarint()) - 1
	} else {
		n = int(b.Int32())
	}
	if w.stop() {
		return w.ended("the SASL auth bytes")
	}
	if n < 0 {
		return fmt.Errorf("%w: SaslAuthenticate auth bytes are null", ErrMalformed)
	}
	msg := b.Src
	if len(msg) > n {
		msg = msg[:n]
	} else if len(msg) < n && w.complete {
		return fmt.Errorf("%w: request ends inside the SASL auth bytes", ErrMalformed)
	} else if len(msg) < n {
		w.truncated = true
	}
	if user, ok := plainUser(msg); ok {
		r.Principal, r.PrincipalFormat = p.intern(user), PrincipalPlain
	} else if user, ok := scramUser(msg); ok {
		r.Principal, r.PrincipalFormat = p.intern(user), PrincipalScram
	}
	return nil
}

// plainUser reads authcid from authzid NUL authcid NUL passwd. Both NULs
// must be present (the second ends the identity), the identity non-empty.
func plainUser(msg []byte) ([]byte, bool) {
	first := bytes.IndexByte(msg, 0)
	if first < 0 {
		return nil, false
	}
	rest := msg[first+1:]
	second := bytes.IndexByte(rest, 0)
	if second <= 0 || second > maxPrincipal {
		return nil, false
	}
	return rest[:second], validPrincipal(rest[:second])
}

// scramUser reads the username of a client-first message: a gs2 header
// (n, y or p=…; then an optional a=authzid), then n=saslname, ending at
// ','. saslname escapes ',' as =2C and '=' as =3D; any other '=' is not a
// username. Later SCRAM messages (c=…,r=…,p=proof) name no user.
func scramUser(msg []byte) ([]byte, bool) {
	if len(msg) < 2 || (msg[0] != 'n' && msg[0] != 'y' && msg[0] != 'p') {
		return nil, false
	}
	// The gs2 header is two comma-separated fields, then a comma.
	comma := bytes.IndexByte(msg, ',')
	if comma < 0 {
		return nil, false
	}
	next := bytes.IndexByte(msg[comma+1:], ',')
	if next < 0 {
		return nil, false
	}
	rest := msg[comma+1+next+1:]
	if !bytes.HasPrefix(rest, []byte("n=")) {
		return nil, false
	}
	rest = rest[2:]
	end := bytes.IndexByte(rest, ',')
	if end <= 0 || end > 3*maxPrincipal {
		return nil, false
	}
	name := make([]byte, 0, end)
	for i := 0; i < end; i++ {
		c := rest[i]
		if c != '=' {
			name = append(name, c)
			continue
		}
		switch {
		case i+2 < end && rest[i+1] == '2' && rest[i+2] == 'C':
			name = append(name, ',')
		case i+2 < end && rest[i+1] == '3' && rest[i+2] == 'D':
			name = append(name, '=')
		default:
			return nil, false
		}
		i += 2
	}
	if len(name) > maxPrincipal {
		return nil, false
	}
	return name, validPrincipal(name)
}

// validPrincipal refuses names with control bytes: user names that a
// broker's administrators created never hold them.
func validPrincipal(name []byte) bool {
	if len(name) == 0 {
		return false
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}
