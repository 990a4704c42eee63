package maps

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/netns"

	"github.com/cilium/ebpf"
)

// TC return codes.
const (
	actUnspec   = 0xffffffff // TC_ACT_UNSPEC (-1): pass, let later programs run
	actRedirect = 7          // TC_ACT_REDIRECT
)

type harness struct {
	t testing.TB
	d *Datapath
}

const brokerPort = 9092

var (
	broker4 = netip.MustParseAddr("198.18.0.1")
	client4 = netip.MustParseAddr("198.18.0.2")
	broker6 = netip.MustParseAddr("2001:db8::1")
	client6 = netip.MustParseAddr("2001:db8::2")
)

// families are the address families every attribution test runs in.
var families = []struct {
	name           string
	client, broker netip.Addr
}{{"v4", client4, broker4}, {"v6", client6, broker6}}

func testOptions() Options {
	o := DefaultOptions()
	o.MaxEntities = 64
	o.MaxConnections = 4096
	o.SampleSlotsPerCPU = 1024
	return o
}

func newHarness(t testing.TB, opts Options) *harness {
	t.Helper()
	netns.RequireRoot(t, "loads BPF programs")
	d, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.SetListeners([]uint16{brokerPort}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetSettings(Settings{Shaper: ShaperNone, StaleAfter: 10 * time.Second, SamplesPerSecond: 200}); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, d: d}
}

// run passes a segment through the ingress (produce) or egress (fetch)
// program and returns the verdict and the priority it left on the skb.
func (h *harness) run(dir Direction, s segment) (verdict, priority uint32) {
	h.t.Helper()
	prog := h.d.IngressProgram()
	if dir == Fetch {
		prog = h.d.EgressProgram()
	}
	var out skbContext
	ret, err := prog.Run(&ebpf.RunOptions{Data: s.frame(), Context: skbContext{}, ContextOut: &out})
	if err != nil {
		h.t.Fatalf("test run: %v", err)
	}
	return ret, out.Priority
}

func (h *harness) counters(dir Direction, entity uint32) Counters {
	h.t.Helper()
	c, err := h.d.EntityCounters(dir, entity)
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// drain reads every sample the data path has produced so far; fragments
// are in the ring buffer as soon as a test run returns, and a sample still
// incomplete when the buffer is empty is delivered as it is.
func drain(t testing.TB, r *SampleReader) []Sample {
	t.Helper()
	var out []Sample
	for {
		r.SetDeadline(time.Now().Add(20 * time.Millisecond))
		s, err := r.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
}

// toBroker and fromBroker build segments of one client connection.
func toBroker(client, broker netip.Addr, clientPort uint16, seq uint32, flags uint8, payload []byte) segment {
	return segment{src: netip.AddrPortFrom(client, clientPort), dst: netip.AddrPortFrom(broker, brokerPort), seq: seq, flags: flags, payload: payload}
}

func fromBroker(client, broker netip.Addr, clientPort uint16, seq uint32, payload []byte) segment {
	return segment{src: netip.AddrPortFrom(broker, brokerPort), dst: netip.AddrPortFrom(client, clientPort), seq: seq, flags: flagACK | flagPSH, payload: payload}
}

// brokerACK is the broker's pure ACK of a client's bytes up to ack: the
// broker's own segment that enters a connection into the table.
func brokerACK(client, broker netip.Addr, clientPort uint16, ack uint32) segment {
	return segment{src: netip.AddrPortFrom(broker, brokerPort), dst: netip.AddrPortFrom(client, clientPort), seq: 1, ack: ack, flags: flagACK}
}

// handshake plays a connection's opening: the client's SYN, the broker's
// SYN-ACK, the client's ACK, and a broker ACK that enters it into the table
// with its requests starting at isn+1.
func (h *harness) handshake(client, broker netip.Addr, clientPort uint16, isn uint32) {
	h.t.Helper()
	c, b := netip.AddrPortFrom(client, clientPort), netip.AddrPortFrom(broker, brokerPort)
	h.run(Produce, segment{src: c, dst: b, seq: isn, flags: flagSYN})
	h.run(Fetch, segment{src: b, dst: c, seq: 7, ack: isn + 1, flags: flagSYN | flagACK})
	h.run(Produce, segment{src: c, dst: b, seq: isn + 1, ack: 8, flags: flagACK})
	h.run(Fetch, segment{src: b, dst: c, seq: 8, ack: isn + 1, flags: flagACK})
}

func connKey(client, broker netip.Addr, clientPort uint16) ConnKey {
	return ConnKey{Peer: netip.AddrPortFrom(client, clientPort), Local: netip.AddrPortFrom(broker, brokerPort)}
}

// runOpts builds RunOptions with an empty __sk_buff context.
type runOpts struct{ Data []byte }

func (r runOpts) opts() *ebpf.RunOptions {
	return &ebpf.RunOptions{Data: r.Data, Context: skbContext{}}
}

// pinnedAndClosed loads a data path pinned in a fresh bpffs and closes it,
// leaving its pins as an agent that exited leaves them; it returns the
// options (PinDir set).
func pinnedAndClosed(t *testing.T) Options {
	t.Helper()
	opts, d := pinnedLoad(t)
	d.Close()
	return opts
}

// pinnedLoad loads a data path that pins under a fresh bpffs; the caller
// closes it.
func pinnedLoad(t *testing.T) (Options, *Datapath) {
	t.Helper()
	netns.RequireRoot(t, "loads BPF programs")
	opts := testOptions()
	opts.PinDir = filepath.Join(bpffs(t), "sluice")
	d, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	return opts, d
}

// policeRuns passes seg n times through the ingress program and counts
// the verdicts: passed, or dropped by the police bucket.
func (h *harness) policeRuns(seg segment, n int) (passed, dropped int) {
	h.t.Helper()
	for i := 0; i < n; i++ {
		switch v, _ := h.run(Produce, seg); v {
		case actUnspec:
			passed++
		case actShot:
			dropped++
		default:
			h.t.Fatalf("verdict %d, want pass or drop", v)
		}
	}
	return passed, dropped
}
