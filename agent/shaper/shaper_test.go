package shaper

import (
	"errors"
	"fmt"
	"github.com/sluice-dev/sluice/agent/shaping"
	"math"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/internal/netns"
	"github.com/sluice-dev/sluice/maps"
)

type classes struct{ set map[[2]uint32]uint32 }

func (c *classes) SetClass(dir maps.Direction, entity, classID uint32) error {
	if c.set == nil {
		c.set = map[[2]uint32]uint32{}
	}
	c.set[[2]uint32{uint32(dir), entity}] = classID
	return nil
}

func (c *classes) Classes(dir maps.Direction) (map[uint32]uint32, error) {
	out := map[uint32]uint32{}
	for k, v := range c.set {
		if k[0] == uint32(dir) && v != 0 {
			out[k[1]] = v
		}
	}
	return out, nil
}

func (c *classes) ClearClasses() error {
	c.set = nil
	return nil
}

func tcState(t testing.TB, ns *netns.NS, dev string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns.Name, "tc", "qdisc", "show", "dev", dev).CombinedOutput()
	if err != nil {
		t.Fatalf("tc: %v %s", err, out)
	}
	// Standard output only: ip prints "Peer netns reference is invalid."
	// to standard error for a veth whose peer's namespace another test is
	// deleting, and those words read as link names.
	links, _ := exec.Command("ip", "netns", "exec", ns.Name, "ip", "-o", "link").Output()
	var names []string
	for _, l := range strings.Split(string(links), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			names = append(names, f[1])
		}
	}
	// htb's direct_packets_stat counts packets, not configuration: the
	// namespace's own traffic (IPv6 address autoconfiguration) moved it
	// between two readings, and a comparison of the operator's root failed.
	qdiscs := directPackets.ReplaceAllString(string(out), "")
	return qdiscs + "links: " + strings.Join(names, " ")
}

var directPackets = regexp.MustCompile(` direct_packets_stat \d+`)

// newTestHTB builds the htb shaper on a new namespace pair, closed when
// the test ends.
func newTestHTB(t *testing.T) (*HTB, *classes, *netns.Pair, int) {
	t.Helper()
	netns.RequireRoot(t, "builds namespaces, qdiscs and IFB devices")
	pair := netns.NewPair(t)
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	cw := &classes{}
	h, err := NewHTB(idx, cw, 200*time.Millisecond, pair.Broker.Do)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, cw, pair, idx
}

// htbWithThreeClasses builds the htb shaper with entities 5 and 6 on
// egress (20 and 1 MB/s) and 5 on ingress (5 MB/s).
func htbWithThreeClasses(t *testing.T, pair *netns.Pair, idx int, cw *classes) *HTB {
	t.Helper()
	h, err := NewHTB(idx, cw, 200*time.Millisecond, pair.Broker.Do)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetRates(maps.Fetch, []shaping.Rate{{Entity: 5, BytesPerSecond: 20e6}, {Entity: 6, BytesPerSecond: 1e6}}); err != nil {
		t.Fatal(err)
	}
	if err := h.SetRates(maps.Produce, []shaping.Rate{{Entity: 5, BytesPerSecond: 5e6}}); err != nil {
		t.Fatal(err)
	}
	return h
}

// The HTB shaper's trees come and go without a trace: tc shows the device
// as before and the IFB is gone.
func TestHTBCloseRestoresDevice(t *testing.T) {
	netns.RequireRoot(t, "builds namespaces, qdiscs and IFB devices")
	pair := netns.NewPair(t)
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	before := tcState(t, pair.Broker, pair.BrokerDev)
	cw := &classes{}
	h := htbWithThreeClasses(t, pair, idx, cw)
	during := tcState(t, pair.Broker, pair.BrokerDev)
	if !strings.Contains(during, "htb") || !strings.Contains(during, IFBName(idx)) {
		t.Errorf("trees not visible:\n%s", during)
	}
	if cw.set[[2]uint32{uint32(maps.Fetch), 5}] == 0 || cw.set[[2]uint32{uint32(maps.Produce), 5}] == 0 {
		t.Errorf("classes not written to the data path: %v", cw.set)
	}
	// Rates move without recreating classes; unlimited removes the class.
	if err := h.SetRates(maps.Fetch, []shaping.Rate{{Entity: 5, BytesPerSecond: 10e6}, {Entity: 6, BytesPerSecond: inf}}); err != nil {
		t.Fatal(err)
	}
	if cw.set[[2]uint32{uint32(maps.Fetch), 6}] != 0 {
		t.Error("an unlimited entity kept its class")
	}
	// The kernel holds the new rate (changes go out in batches).
	var got uint64
	pair.Broker.Do(func() error {
		link, _ := netlink.LinkByIndex(idx)
		list, err := netlink.ClassList(link, netlink.MakeHandle(1, 0))
		for _, c := range list {
			if hc, ok := c.(*netlink.HtbClass); ok && hc.Handle == cw.set[[2]uint32{uint32(maps.Fetch), 5}] {
				got = hc.Ceil // the limit; the rate is the guarantee (none here)
			}
		}
		return err
	})
	if want := uint64(wireRate(10e6)); got < want-8 || got > want+8 {
		t.Errorf("class ceiling in the kernel %d B/s, want %d (10 MB/s of payload in wire bytes)", got, want)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); after != before {
		t.Errorf("device not restored.\nbefore: %s\nafter:  %s", before, after)
	}
	for k, v := range cw.set {
		if v != 0 {
			t.Errorf("class %v left set to %x", k, v)
		}
	}
}

// A restarted agent adopts the trees an earlier one left attached: same
// IFB, same classes at the same rates, the data path's class ids untouched;
// a class id pointing at no class is unset, and new entities get classes
// that collide with none.
func TestHTBAdoptsTheTreesItLeft(t *testing.T) {
	netns.RequireRoot(t, "builds namespaces, qdiscs and IFB devices")
	pair := netns.NewPair(t)
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	before := tcState(t, pair.Broker, pair.BrokerDev)
	cw := &classes{}
	first := htbWithThreeClasses(t, pair, idx, cw)
	ifb := first.IFBIndex()
	bound := map[[2]uint32]uint32{}
	for k, v := range cw.set {
		bound[k] = v
	}
	cw.SetClass(maps.Fetch, 9, netlink.MakeHandle(1, 0x77)) // no such class
	// The trees without their counters (tcState leaves them out).
	treeNow := func() string { return tcState(t, pair.Broker, pair.BrokerDev) }
	tree := treeNow()
	// The first agent exits leaving everything (keep_attached_on_exit).
	second, err := NewHTB(idx, cw, 200*time.Millisecond, pair.Broker.Do)
	if err != nil {
		t.Fatal(err)
	}
	if now := treeNow(); second.IFBIndex() != ifb || now != tree {
		t.Errorf("trees rebuilt, not adopted: IFB %d -> %d\nbefore: %s\nafter:  %s", ifb, second.IFBIndex(), tree, now)
	}
	for k, v := range bound {
		if cw.set[k] != v {
			t.Errorf("class of %v: %x before, %x after adoption", k, v, cw.set[k])
		}
	}
	if cw.set[[2]uint32{uint32(maps.Fetch), 9}] != 0 {
		t.Error("a class id pointing at no class was kept")
	}
	if c := second.trees[maps.Fetch].entity[6]; c == nil || math.Abs(c.wire-wireRate(1e6)) > 8 {
		t.Errorf("entity 6's class adopted as %+v, want its wire rate %.0f", c, wireRate(1e6))
	}
	if err := second.SetRates(maps.Fetch, []shaping.Rate{{Entity: 7, BytesPerSecond: 2e6}, {Entity: 6, BytesPerSecond: 3e6}}); err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]bool{}
	for k, v := range cw.set {
		if k[0] == uint32(maps.Fetch) && v != 0 {
			if seen[v] {
				t.Errorf("class %x given to two entities: %v", v, cw.set)
			}
			seen[v] = true
		}
	}
	// An agent that shapes without trees (police, shadow) removes them.
	if err := RemoveLeftoverTrees(idx, pair.Broker.Do); err != nil {
		t.Fatal(err)
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); after != before {
		t.Errorf("leftover trees not removed.\nbefore: %s\nafter:  %s", before, after)
	}
	if err := RemoveLeftoverTrees(idx, pair.Broker.Do); err != nil {
		t.Errorf("with nothing left: %v", err)
	}
	second.Close()
}

// Each tree is a hierarchy: the parent 1:1 at the capacity, each entity's
// class under it guaranteed its reservation and capped at its limit.
func TestHTBHierarchy(t *testing.T) {
	h, cw, pair, idx := newTestHTB(t)
	if err := h.SetCapacity(maps.Fetch, 40e6); err != nil {
		t.Fatal(err)
	}
	if err := h.SetRates(maps.Fetch, []shaping.Rate{{Entity: 5, BytesPerSecond: 30e6, Guaranteed: 10e6}, {Entity: 6, BytesPerSecond: 4e6}}); err != nil {
		t.Fatal(err)
	}
	type class struct{ parent, rate, ceil uint64 }
	got := map[uint32]class{}
	pair.Broker.Do(func() error {
		link, _ := netlink.LinkByIndex(idx)
		list, err := netlink.ClassList(link, netlink.MakeHandle(1, 0))
		for _, c := range list {
			if hc, ok := c.(*netlink.HtbClass); ok {
				got[hc.Handle] = class{uint64(hc.Parent), hc.Rate, hc.Ceil}
			}
		}
		return err
	})
	near := func(a uint64, b float64) bool { return math.Abs(float64(a)-b) <= 8 }
	parent := got[netlink.MakeHandle(1, 1)]
	if parent.parent != uint64(netlink.HANDLE_ROOT) || !near(parent.rate, wireRate(40e6)) || !near(parent.ceil, wireRate(40e6)) {
		t.Errorf("parent class %+v, want 1:1 under the root at %.0f wire B/s", parent, wireRate(40e6))
	}
	for entity, want := range map[uint32][2]float64{5: {wireRate(10e6), wireRate(30e6)}, 6: {minRate, wireRate(4e6)}} {
		c := got[cw.set[[2]uint32{uint32(maps.Fetch), entity}]]
		if c.parent != uint64(netlink.MakeHandle(1, 1)) || !near(c.rate, want[0]) || !near(c.ceil, want[1]) {
			t.Errorf("entity %d class %+v, want under 1:1 with rate %.0f ceil %.0f", entity, c, want[0], want[1])
		}
	}
}

// A root qdisc someone else configured is never replaced.
func TestHTBRefusesForeignRootQdisc(t *testing.T) {
	netns.RequireRoot(t, "builds namespaces, qdiscs and IFB devices")
	pair := netns.NewPair(t)
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	if out, err := exec.Command("ip", "netns", "exec", pair.Broker.Name, "tc", "qdisc", "add", "dev", pair.BrokerDev, "root", "handle", "7:", "tbf",
		"rate", "1gbit", "burst", "64kb", "latency", "50ms").CombinedOutput(); err != nil {
		t.Fatalf("add tbf: %v %s", err, out)
	}
	before := tcState(t, pair.Broker, pair.BrokerDev)
	if _, err := NewHTB(idx, &classes{}, 200*time.Millisecond, pair.Broker.Do); !errors.Is(err, ErrForeignRootQdisc) {
		t.Fatalf("NewHTB over a foreign tbf: %v, want ErrForeignRootQdisc", err)
	}
	if _, err := NewEDT(idx, nopRates{}, pair.Broker.Do); err == nil {
		t.Fatal("NewEDT over a foreign tbf succeeded")
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); after != before {
		t.Errorf("a refused shaper changed the device.\nbefore: %s\nafter:  %s", before, after)
	}
}

// A device that holds one of sluice's IFB names but is not an IFB is not
// sluice's: the shaper refuses to start, naming it, and neither start nor
// removal deletes it.
func TestHTBLeavesAForeignDeviceWithItsIFBName(t *testing.T) {
	netns.RequireRoot(t, "builds namespaces, qdiscs and IFB devices")
	pair := netns.NewPair(t)
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	name := IFBName(idx)
	if out, err := exec.Command("ip", "netns", "exec", pair.Broker.Name, "ip", "link", "add", name, "type", "veth", "peer", "name", "op-peer0").CombinedOutput(); err != nil {
		t.Fatalf("add veth %s: %v %s", name, err, out)
	}
	before := tcState(t, pair.Broker, pair.BrokerDev)
	if _, err := NewHTB(idx, &classes{}, 200*time.Millisecond, pair.Broker.Do); err == nil || !strings.Contains(err.Error(), "a veth device named "+name) {
		t.Fatalf("NewHTB with a veth named %s: %v", name, err)
	}
	if err := RemoveLeftoverTrees(idx, pair.Broker.Do); err != nil {
		t.Logf("removal: %v", err)
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); after != before || !strings.Contains(after, name+"@op-peer0") {
		t.Errorf("the foreign device or the interface changed.\nbefore: %s\nafter:  %s", before, after)
	}

	// An IFB under that name that sluice did not make (no alias of
	// sluice's, no tree of its own) is foreign too: refused and left.
	ip := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"netns", "exec", pair.Broker.Name}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
		return string(out)
	}
	ip("ip", "link", "del", name)
	ip("ip", "link", "add", name, "type", "ifb")
	before = tcState(t, pair.Broker, pair.BrokerDev)
	if _, err := NewHTB(idx, &classes{}, 200*time.Millisecond, pair.Broker.Do); !errors.Is(err, ErrForeignDevice) || !strings.Contains(err.Error(), "without sluice's alias") {
		t.Fatalf("NewHTB with a foreign IFB named %s: %v", name, err)
	}
	if err := RemoveLeftoverTrees(idx, pair.Broker.Do); !errors.Is(err, ErrForeignDevice) {
		t.Errorf("removal beside a foreign IFB: %v, want ErrForeignDevice", err)
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); after != before {
		t.Errorf("the foreign IFB or the interface changed.\nbefore: %s\nafter:  %s", before, after)
	}
	// sluice's own IFB carries the alias from its creation on.
	ip("ip", "link", "del", name)
	h, err := NewHTB(idx, &classes{}, 200*time.Millisecond, pair.Broker.Do)
	if err != nil {
		t.Fatal(err)
	}
	if shown := ip("ip", "link", "show", name); !strings.Contains(shown, "alias sluice:") {
		t.Errorf("sluice's IFB without its alias: %s", shown)
	}
	h.Close()
}

type nopRates struct{}

func (nopRates) SetEntityRates(maps.Direction, []maps.EntityRate) error { return nil }

// The fq probe and the edt backend agree: where fq installs, edt builds its
// qdiscs and removes them again; where it does not (these test machines),
// edt is refused with ErrNoFQ and nothing is left behind.
func TestFQProbeAndEDTFallback(t *testing.T) {
	netns.RequireRoot(t, "builds namespaces, qdiscs and IFB devices")
	pair := netns.NewPair(t)
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	before := tcState(t, pair.Broker, pair.BrokerDev)
	probeErr := ProbeFQ(pair.Broker.Do)
	e, err := NewEDT(idx, nopRates{}, pair.Broker.Do)
	if probeErr != nil {
		t.Logf("fq unavailable here (%v): auto picks htb", probeErr)
		if !errors.Is(err, ErrNoFQ) {
			t.Errorf("edt without fq: %v, want ErrNoFQ", err)
		}
	} else {
		if err != nil {
			t.Fatalf("fq probes fine but edt fails: %v", err)
		}
		if e.IFBIndex() == 0 {
			t.Error("edt without an ingress IFB")
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); after != before {
		t.Errorf("probe or edt left traces.\nbefore: %s\nafter:  %s", before, after)
	}
}

var inf = math.Inf(1)

// BenchmarkSetRates applies 10,000 rate changes at once: htb (netlink, one
// class change per entity; goal ≤ 200 ms) and the BPF backends (one batch
// map write; goal ≤ 5 ms).
func BenchmarkSetRates(b *testing.B) {
	netns.RequireRoot(b, "builds namespaces, qdiscs and IFB devices")
	const n = 10000
	rates := func(round int) []shaping.Rate {
		out := make([]shaping.Rate, n)
		for i := range out {
			out[i] = shaping.Rate{Entity: uint32(i + 2), BytesPerSecond: float64(1e6 + 1e5*((i+round)%7))}
		}
		return out
	}
	b.Run(fmt.Sprintf("htb/changes=%d", n), func(b *testing.B) {
		pair, err := netns.CreatePair()
		if err != nil {
			b.Fatal(err)
		}
		defer pair.Delete()
		idx, _ := pair.Broker.Index(pair.BrokerDev)
		h, err := NewHTB(idx, &classes{}, 200*time.Millisecond, pair.Broker.Do)
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close()
		if err := h.SetRates(maps.Fetch, rates(0)); err != nil { // classes exist: what follows are changes
			b.Fatal(err)
		}
		round := 1
		for b.Loop() {
			if err := h.SetRates(maps.Fetch, rates(round)); err != nil {
				b.Fatal(err)
			}
			round++
		}
	})
	b.Run(fmt.Sprintf("edt+police/changes=%d", n), func(b *testing.B) {
		opts := maps.DefaultOptions()
		opts.MaxEntities = n + 2
		opts.MaxConnections = 1024
		d, err := maps.Load(opts)
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		p := NewPolice(d)
		round := 1
		for b.Loop() {
			if err := p.SetRates(maps.Fetch, rates(round)); err != nil {
				b.Fatal(err)
			}
			round++
		}
	})
}

// Held reports the bytes a class let through: what reached the device,
// counted once per packet sent.
func TestHTBHeldReportsSentBytes(t *testing.T) {
	h, cw, pair, _ := newTestHTB(t)
	if err := h.SetRates(maps.Fetch, []shaping.Rate{{Entity: 5, BytesPerSecond: 10e6}}); err != nil {
		t.Fatal(err)
	}
	// What the data path does to an entity's segments (skb->priority = its
	// class), done here with SO_PRIORITY on a UDP socket.
	const datagrams, size = 100, 1000
	err := pair.Broker.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PRIORITY, int(cw.set[[2]uint32{uint32(maps.Fetch), 5}])); err != nil {
			return err
		}
		to := &unix.SockaddrInet4{Port: 9, Addr: pair.ClientIP.As4()}
		for range datagrams {
			if err := unix.Sendto(fd, make([]byte, size), 0, to); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	held, err := h.Held(maps.Fetch)
	if err != nil {
		t.Fatal(err)
	}
	const wire = datagrams * (size + 8 + 20 + 14) // UDP, IPv4 and Ethernet headers
	if len(held) != 1 || held[0].Entity != 5 || held[0].Sent != payloadBytes(wire) || held[0].Dropped != 0 {
		t.Errorf("held %+v, want entity 5 with %d wire bytes (%d as payload) sent and nothing dropped", held, wire, payloadBytes(wire))
	}
}

// HTB's fields never wrap: rates beyond the largest configuration takes
// (and a computed +Inf or NaN) are held to it, bursts to uint32.
func TestHTBFieldsNeverOverflow(t *testing.T) {
	for in, want := range map[float64]uint64{
		1e6: 8e6, config.MaxRate: 1e12, 1e300: 1e12, math.Inf(1): 1e12, math.NaN(): 8, -5: 8, 0: 8,
	} {
		if got := htbBits(in); got != want {
			t.Errorf("htbBits(%v) = %d, want %d", in, got, want)
		}
	}
	if b := burst(config.MaxRate); b != uint32(config.MaxRate*0.01) {
		t.Errorf("burst at the largest rate: %d", b)
	}
	if b := burst(1e300); b != math.MaxUint32 {
		t.Errorf("burst(1e300) = %d", b)
	}
}

// A multi-queue device's default root (mq 0: with the kernel's children,
// which no one can retune in place) is replaced by htb and comes back as
// it was when the shaper closes; an mq an operator installed (a handle of
// its own, tuned children) is refused, naming it, and left untouched.
func TestHTBOnMultiQueueDevices(t *testing.T) {
	netns.RequireRoot(t, "builds namespaces, qdiscs and IFB devices")
	pair := netns.NewPair(t)
	const dev = "slmq0"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"netns", "exec", pair.Broker.Name}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
	}
	ip("ip", "link", "add", dev, "numtxqueues", "4", "numrxqueues", "4", "type", "ifb")
	ip("ip", "link", "set", dev, "up")
	idx, err := pair.Broker.Index(dev)
	if err != nil {
		t.Fatal(err)
	}
	before := tcState(t, pair.Broker, dev)
	if !strings.Contains(before, "mq 0: root") || strings.Count(before, "parent :") != 4 {
		t.Fatalf("not the kernel's default multi-queue root:\n%s", before)
	}
	h, err := NewHTB(idx, &classes{}, 200*time.Millisecond, pair.Broker.Do)
	if err != nil {
		t.Fatalf("htb over the default mq: %v", err)
	}
	if during := tcState(t, pair.Broker, dev); !strings.Contains(during, "htb 1: root") {
		t.Errorf("htb did not take the root:\n%s", during)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if after := tcState(t, pair.Broker, dev); after != before {
		t.Errorf("the default mq did not come back as it was.\nbefore:\n%s\nafter:\n%s", before, after)
	}

	ip("tc", "qdisc", "replace", "dev", dev, "root", "handle", "5:", "mq")
	ip("tc", "qdisc", "replace", "dev", dev, "parent", "5:2", "pfifo", "limit", "50")
	tuned := tcState(t, pair.Broker, dev)
	_, err = NewHTB(idx, &classes{}, 200*time.Millisecond, pair.Broker.Do)
	if !errors.Is(err, ErrForeignRootQdisc) || !strings.Contains(err.Error(), "mq 5:") {
		t.Fatalf("htb over an operator's mq: %v, want ErrForeignRootQdisc naming mq 5:", err)
	}
	if err := pair.Broker.Do(func() error { return CheckRoot(dev) }); !errors.Is(err, ErrForeignRootQdisc) {
		t.Errorf("check-config's prediction: %v, want ErrForeignRootQdisc", err)
	}
	if after := tcState(t, pair.Broker, dev); after != tuned {
		t.Errorf("a refused shaper changed the operator's mq.\nbefore:\n%s\nafter:\n%s", tuned, after)
	}

	// replace_root_qdisc: the operator's mq is deleted, named, and htb
	// takes the root; when it goes, the kernel's default mq comes back.
	replaced, err := ReplaceForeignRoot(idx, pair.Broker.Do)
	if err != nil || replaced != "mq 5: on "+dev {
		t.Fatalf("ReplaceForeignRoot: %q, %v; want mq 5: on %s", replaced, err, dev)
	}
	if again, err := ReplaceForeignRoot(idx, pair.Broker.Do); err != nil || again != "" {
		t.Errorf("ReplaceForeignRoot over the kernel's default: %q, %v; want nothing replaced", again, err)
	}
	h, err = NewHTB(idx, &classes{}, 200*time.Millisecond, pair.Broker.Do)
	if err != nil {
		t.Fatalf("htb after the operator's root was replaced: %v", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if after := tcState(t, pair.Broker, dev); after != before {
		t.Errorf("after replace_root_qdisc and close, want the kernel's default mq.\nwant:\n%s\ngot:\n%s", before, after)
	}
}

// #48 item 7: the htb root is sluice's by its mark, not its handle. With
// sluice's IFB left by an earlier agent (keep_attached_on_exit), an
// operator's own `htb 1:` at the interface's root is not taken for
// sluice's tree: the shaper refuses it, naming it, and it stays as it was,
// where before it was adopted or deleted for rebuilding. Sluice's own tree
// carries the mark and is adopted.
func TestHTBKnowsItsRootByItsMark(t *testing.T) {
	netns.RequireRoot(t, "builds namespaces, qdiscs and IFB devices")
	pair := netns.NewPair(t)
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	cw := &classes{}
	first := htbWithThreeClasses(t, pair, idx, cw)
	t.Cleanup(func() { first.Close() })
	var r2q uint32
	pair.Broker.Do(func() error {
		qs, err := netlink.QdiscList(mustLinkByIndex(t, idx))
		for _, q := range qs {
			if h, ok := q.(*netlink.Htb); ok && h.Parent == netlink.HANDLE_ROOT {
				r2q = h.Rate2Quantum
			}
		}
		return err
	})
	if r2q != treeMarker {
		t.Fatalf("sluice's root carries r2q %d, want its mark %d", r2q, treeMarker)
	}
	// The first agent exits leaving everything; an operator then puts an
	// htb of their own, with handle 1:, at the interface's root.
	for _, args := range [][]string{{"qdisc", "del", "dev", pair.BrokerDev, "root"}, {"qdisc", "add", "dev", pair.BrokerDev, "root", "handle", "1:", "htb", "default", "10"}} {
		if out, err := exec.Command("ip", append([]string{"netns", "exec", pair.Broker.Name, "tc"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("operator's htb: tc %v: %v %s", args, err, out)
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", pair.Broker.Name, "tc", "class", "add", "dev", pair.BrokerDev, "parent", "1:", "classid", "1:10", "htb", "rate", "1gbit").CombinedOutput(); err != nil {
		t.Fatalf("operator's class: %v %s", err, out)
	}
	before := tcState(t, pair.Broker, pair.BrokerDev)
	_, err := NewHTB(idx, cw, 200*time.Millisecond, pair.Broker.Do)
	if !errors.Is(err, ErrForeignRootQdisc) || !strings.Contains(err.Error(), "htb 1:") {
		t.Errorf("NewHTB over an operator's htb 1: beside sluice's IFB: %v; want ErrForeignRootQdisc naming it", err)
	}
	if err := pair.Broker.Do(func() error { return CheckRoot(pair.BrokerDev) }); !errors.Is(err, ErrForeignRootQdisc) {
		t.Errorf("check-config's prediction: %v, want ErrForeignRootQdisc", err)
	}
	if err := RemoveLeftoverTrees(idx, pair.Broker.Do); err != nil {
		t.Fatal(err)
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); !strings.Contains(after, "qdisc htb 1: root") || !strings.Contains(after, "default 0x10") {
		t.Errorf("the operator's htb did not survive sluice's start and leftover removal.\nbefore: %s\nafter:  %s", before, after)
	}
}

func mustLinkByIndex(t *testing.T, idx int) netlink.Link {
	t.Helper()
	l, err := netlink.LinkByIndex(idx)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
