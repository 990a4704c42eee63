package kafka

import (
	"bytes"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

const secret = "s3cret-Passw0rd"

func authenticate(version int16, msg []byte) []byte {
	req := kmsg.NewPtrSASLAuthenticateRequest()
	req.SetVersion(version)
	req.SASLAuthBytes = msg
	return kt.Frame(req, 7, kt.Str("app"))
}

// The principal comes from PLAIN's authcid and SCRAM's n= attribute in
// every SaslAuthenticate version; the handshake names the mechanism; no
// other byte of the message reaches the Request.
func TestParseSASLPrincipals(t *testing.T) {
	p := NewParser()
	var r Request
	for _, c := range []struct {
		name   string
		msg    string
		user   string
		format PrincipalFormat
	}{
		{"plain", "\x00alice\x00" + secret, "alice", PrincipalPlain},
		{"plain with authzid", "alice\x00alice\x00" + secret, "alice", PrincipalPlain},
		{"scram", "n,,n=bob,r=fyko+d2lbbFgONRv9qkxdawL", "bob", PrincipalScram},
		{"scram escapes", "n,,n=b=2Co=3Db,r=abc", "b,o=b", PrincipalScram},
		{"scram with authzid", "n,a=bob,n=bob,r=abc", "bob", PrincipalScram},
		{"scram final names nobody", "c=biws,r=abc,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", "", NoPrincipal},
		{"bad scram escape", "n,,n=b=41b,r=abc", "", NoPrincipal},
		{"plain without end", "\x00alice", "", NoPrincipal},
		{"empty identity", "\x00\x00" + secret, "", NoPrincipal},
		{"control byte", "\x00al\x01ice\x00" + secret, "", NoPrincipal},
	} {
		for v := int16(0); v <= 2; v++ {
			if err := p.Parse(authenticate(v, []byte(c.msg)), &r); err != nil {
				t.Fatalf("%s v%d: %v", c.name, v, err)
			}
			if r.APIKey != KeySaslAuthenticate || r.Principal != c.user || r.PrincipalFormat != c.format {
				t.Errorf("%s v%d: principal %q format %d, want %q %d", c.name, v, r.Principal, r.PrincipalFormat, c.user, c.format)
			}
		}
	}
	for _, mech := range []string{MechanismPlain, MechanismScramSHA512, "GSSAPI", "\x00hostile"} {
		req := kmsg.NewPtrSASLHandshakeRequest()
		req.SetVersion(1)
		req.Mechanism = mech
		if err := p.Parse(kt.Frame(req, 1, kt.Str("app")), &r); err != nil {
			t.Fatal(err)
		}
		want := mech
		if mech != MechanismPlain && mech != MechanismScramSHA512 {
			want = MechanismOther
		}
		if r.Mechanism != want {
			t.Errorf("handshake %q: mechanism %q, want %q", mech, r.Mechanism, want)
		}
	}
}

// A sample cut inside the password still names the user; one cut inside
// the user names nobody; a complete request whose auth bytes overrun it
// is malformed.
func TestParseSASLTruncated(t *testing.T) {
	p := NewParser()
	var r Request
	full := authenticate(1, []byte("\x00alice\x00"+secret))
	cut := bytes.Index(full, []byte(secret)) + 3
	if err := p.Parse(full[:cut], &r); err != nil || r.Principal != "alice" || !r.Truncated {
		t.Errorf("cut in the password: %q truncated %v err %v", r.Principal, r.Truncated, err)
	}
	if err := p.Parse(full[:bytes.Index(full, []byte("alice"))+3], &r); err != nil || r.Principal != "" {
		t.Errorf("cut in the user: %q err %v", r.Principal, err)
	}
	// v1's auth bytes length sits after size, key, version, correlation id
	// and the client-id "app": 4+2+2+4+2+3 bytes in.
	bad := append([]byte(nil), full...)
	bad[18] = 0x10 // 4 KiB of auth bytes in a request of a few dozen
	if err := p.Parse(bad, &r); !errors.Is(err, ErrMalformed) || r.Principal != "" {
		t.Errorf("an overrunning length: principal %q, err %v; want ErrMalformed and no principal", r.Principal, err)
	}
}
