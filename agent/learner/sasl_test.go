package learner

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/agent/entity"
	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

const usersConfig = `
entities:
  clients:
    app: {consumer_byte_rate: 70MiB}
  users:
    alice: {consumer_byte_rate: 10MiB}
    bob:
      clients:
        reports: {consumer_byte_rate: 2MiB}
  topic-partitions:
    core-topic-0: {producer_byte_reservation: 50MiB}
`

func handshake(mechanism string) kmsg.Request {
	r := kmsg.NewPtrSASLHandshakeRequest()
	r.SetVersion(1)
	r.Mechanism = mechanism
	return r
}

func authenticate(msg string) kmsg.Request {
	r := kmsg.NewPtrSASLAuthenticateRequest()
	r.SetVersion(2)
	r.SASLAuthBytes = []byte(msg)
	return r
}

// On SASL_PLAINTEXT listeners (odd connection numbers here) the principal
// of a PLAIN or SCRAM login decides the user levels; until it is known the
// connection stays undecided (the unknown entity); a principal must come
// in the format the handshake's mechanism uses; on other listeners a
// SaslAuthenticate names nobody; configured topic-partitions still win.
func TestLearnSASLPrincipals(t *testing.T) {
	l := New[int](mustPolicy(t, usersConfig), nil)
	l.SetSASLListeners(func(c int) bool { return c%2 == 1 })
	user := func(name string) Target { return Target{Key: entity.Key{Kind: entity.KindUser, Name: name}} }

	// PLAIN: undecided through ApiVersions and the handshake.
	if d := learn(t, l, 1, apiVersions(), "app"); d.Decided != [2]bool{} {
		t.Fatalf("decided before authentication: %+v", d)
	}
	learn(t, l, 1, handshake("PLAIN"), "app")
	if d := learn(t, l, 1, authenticate("\x00alice\x00pw"), "app"); d.Fetch != user("alice") || d.Produce != user("alice") {
		t.Errorf("alice over PLAIN: %+v, want user alice both ways", d)
	}
	if d := learn(t, l, 1, kt.Produce(9, kt.TP{Topic: "core-topic", Partitions: []int32{0}}), "app"); d.Produce != topicPart("core-topic-0") {
		t.Errorf("alice producing to a configured topic-partition: %+v", d.Produce)
	}
	// SCRAM, a <user, client-id> level.
	learn(t, l, 3, handshake("SCRAM-SHA-512"), "reports")
	if d := learn(t, l, 3, authenticate("n,,n=bob,r=nonce"), "reports"); d.Fetch.Key != (entity.Key{Kind: entity.KindUserClient, Name: "bob/reports"}) {
		t.Errorf("bob's reports over SCRAM: %+v", d.Fetch)
	}
	// A PLAIN message after a SCRAM handshake is not a principal.
	learn(t, l, 5, handshake("SCRAM-SHA-256"), "app")
	if d := learn(t, l, 5, authenticate("\x00alice\x00pw"), "app"); d.Decided != [2]bool{} {
		t.Errorf("mismatched format decided %+v", d)
	}
	// GSSAPI: no principal this learner reads; the client-id decides.
	learn(t, l, 7, handshake("GSSAPI"), "app")
	if d := learn(t, l, 7, apiVersions(), "app"); d.Fetch != client("app") {
		t.Errorf("GSSAPI connection: %+v, want client app", d.Fetch)
	}
	// A PLAINTEXT listener: the claim is ignored.
	learn(t, l, 2, handshake("PLAIN"), "app")
	if d := learn(t, l, 2, authenticate("\x00alice\x00pw"), "app"); d.Fetch != client("app") {
		t.Errorf("a SASL claim on a PLAINTEXT listener: %+v, want client app", d.Fetch)
	}
	// A second login on an authenticated connection changes nothing (Kafka
	// refuses a re-authentication as another principal and closes).
	if d := learn(t, l, 1, authenticate("\x00bob\x00pw"), "app"); d.Fetch != user("alice") {
		t.Errorf("re-authentication moved the connection: %+v", d.Fetch)
	}
}
