package maps

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/netns"
)

// closing reports whether the data path marked a connection closing.
func (h *harness) closing(key ConnKey) bool {
	h.t.Helper()
	found, closing := false, false
	if err := h.d.EachBinding(func(b Binding) {
		if b.Conn == key {
			found, closing = true, b.Closing
		}
	}); err != nil {
		h.t.Fatal(err)
	}
	if !found {
		h.t.Fatalf("%s is not in the table", key)
	}
	return closing
}

// Only what proves a connection's end marks it closing: the broker's own
// FIN or RST, or a client's RST at exactly the next byte both request
// tracking and the broker's socket expect (reset_test.go, on real sockets:
// these connections have none, and no payload was followed). A RST or FIN
// an off-path host forges with the 4-tuple and a guessed sequence number
// leaves the connection and its binding alone, and so does a client's RST
// anywhere near where its stream stands, which an earlier rule took (from
// 1 MiB behind to 64 KiB ahead of the next request start).
func TestConnectionEndsOnlyByProof(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			h := newHarness(t, testOptions())
			const isn = 1_000_000
			next := uint32(isn + 1) // where the client's next request starts
			cases := []struct {
				name    string
				seg     func(port uint16) segment
				dir     Direction
				closing bool
			}{
				{"forged RST far behind", func(p uint16) segment { return toBroker(f.client, f.broker, p, next-(1<<30), flagRST, nil) }, Produce, false},
				{"forged RST far ahead", func(p uint16) segment { return toBroker(f.client, f.broker, p, next+(1<<30), flagRST|flagACK, nil) }, Produce, false},
				{"forged RST just past the old window", func(p uint16) segment { return toBroker(f.client, f.broker, p, next+(1<<16)+1, flagRST, nil) }, Produce, false},
				{"client FIN", func(p uint16) segment { return toBroker(f.client, f.broker, p, next, flagFIN|flagACK, nil) }, Produce, false},
				{"client RST at the next request start", func(p uint16) segment { return toBroker(f.client, f.broker, p, next, flagRST, nil) }, Produce, false},
				{"client RST 1000 bytes behind", func(p uint16) segment { return toBroker(f.client, f.broker, p, next-1000, flagRST, nil) }, Produce, false},
				{"client RST inside a request", func(p uint16) segment { return toBroker(f.client, f.broker, p, next-4096, flagRST|flagACK, nil) }, Produce, false},
				{"client RST just inside the old window", func(p uint16) segment { return toBroker(f.client, f.broker, p, next+(1<<16), flagRST, nil) }, Produce, false},
				{"broker FIN", func(p uint16) segment {
					return segment{src: netipPort(f.broker, brokerPort), dst: netipPort(f.client, p), seq: 8, ack: next, flags: flagFIN | flagACK}
				}, Fetch, true},
				{"broker RST", func(p uint16) segment {
					return segment{src: netipPort(f.broker, brokerPort), dst: netipPort(f.client, p), seq: 8, flags: flagRST}
				}, Fetch, true},
			}
			for i, c := range cases {
				port := uint16(41000 + i)
				key := connKey(f.client, f.broker, port)
				h.handshake(f.client, f.broker, port, isn)
				if err := h.d.BindConns([]Binding{{Conn: key, Produce: 5, Fetch: 5}}); err != nil {
					t.Fatal(err)
				}
				h.run(c.dir, c.seg(port))
				if got := h.closing(key); got != c.closing {
					t.Errorf("%s: closing = %v, want %v", c.name, got, c.closing)
				}
				if b, ok, _ := h.d.Binding(key); !ok || b.Produce != 5 || b.Fetch != 5 {
					t.Errorf("%s: binding %+v %v, want entity 5 both ways", c.name, b, ok)
				}
			}
		})
	}
}

// A connection's identity is pinned state: it outlives the agent that
// saved it, goes when the agent forgets it (the connection closed), and
// goes when the broker accepts a new connection on the 4-tuple, so that no
// later connection inherits a principal it never proved.
func TestIdentityOutlivesAgentNotConnection(t *testing.T) {
	netns.RequireRoot(t, "loads BPF programs")
	opts := testOptions()
	opts.PinDir = filepath.Join(bpffs(t), "sluice")
	first, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, d: first}
	if err := first.SetListeners([]uint16{brokerPort}); err != nil {
		t.Fatal(err)
	}
	alice := connKey(client4, broker4, 42001)
	bob := connKey(client6, broker6, 42002)
	carol := connKey(client4, broker4, 42003)
	pending := connKey(client6, broker6, 42005) // between its handshake and its login
	for k, id := range map[ConnKey]Identity{
		alice:   {Mechanism: "PLAIN", User: "alice"},
		bob:     {Mechanism: "SCRAM-SHA-512", User: strings.Repeat("b", 255)},
		carol:   {Mechanism: "SCRAM-SHA-256", User: "carol"},
		pending: {Mechanism: "SCRAM-SHA-256"},
	} {
		if err := first.SaveIdentity(k, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.SaveIdentity(connKey(client4, broker4, 42004), Identity{Mechanism: "PLAIN", User: strings.Repeat("x", 256)}); !errors.Is(err, ErrIdentityTooLong) {
		t.Errorf("a 256-byte principal: %v, want ErrIdentityTooLong (never cut)", err)
	}
	// The agent restarts: a new load adopts the pins.
	first.Close()
	d, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); Unpin(opts.PinDir) })
	h.d = d
	if err := d.SetListeners([]uint16{brokerPort}); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := d.Identity(bob); err != nil || !ok || got.User != strings.Repeat("b", 255) || got.Mechanism != "SCRAM-SHA-512" {
		t.Errorf("bob after a restart: %+v %v %v", got, ok, err)
	}
	if got, ok, err := d.Identity(pending); err != nil || !ok || got != (Identity{Mechanism: "SCRAM-SHA-256"}) {
		t.Errorf("a login under way after a restart: %+v %v %v, want its mechanism alone", got, ok, err)
	}
	// The broker's SYN-ACK on alice's 4-tuple: a new connection.
	h.run(Fetch, segment{src: alice.Local, dst: alice.Peer, seq: 1, ack: 77, flags: flagSYN | flagACK})
	if got, ok, _ := d.Identity(alice); ok {
		t.Errorf("alice's identity after a new connection took the 4-tuple: %+v, want none", got)
	}
	if err := d.ForgetIdentities([]ConnKey{carol, alice, pending}); err != nil {
		t.Errorf("forget (one already gone): %v", err)
	}
	if n, _ := d.Identities(); n != 1 {
		t.Errorf("%d identities left, want bob's only", n)
	}
}
