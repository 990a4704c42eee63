// Package netns builds the network namespaces and veth pairs that sluice's
// integration tests run in (198.18.0.0/15, never a real network), and
// removes them when the test ends, also when it fails.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"github.com/cilium/ebpf/rlimit"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// NS is a named network namespace.
type NS struct {
	Name   string
	handle netns.NsHandle
}

// Prefix is the name prefix of every namespace and device tests create, so
// leftovers are easy to find (`ip netns | grep sl-`).
const Prefix = "sl-"

// Suffix returns a short random suffix for unique names.
func Suffix() string {
	b := make([]byte, 3)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// New creates a namespace named Prefix+name and deletes it at cleanup.
func New(t testing.TB, name string) *NS {
	t.Helper()
	ns, err := Create(Prefix + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Delete(); err != nil {
			t.Errorf("delete namespace %s: %v", ns.Name, err)
		}
	})
	return ns
}

// Create makes a named namespace (as `ip netns add`), with loopback up.
func Create(name string) (*NS, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	h, err := netns.NewNamed(name) // moves this thread into it
	if err != nil {
		// NewNamed may fail after moving the thread: bring it back before
		// the runtime hands the thread to another goroutine.
		netns.Set(orig)
		return nil, fmt.Errorf("create namespace %s: %w", name, err)
	}
	if lo, err := netlink.LinkByName("lo"); err == nil {
		netlink.LinkSetUp(lo)
	}
	if err := netns.Set(orig); err != nil {
		return nil, fmt.Errorf("return from namespace %s: %w", name, err)
	}
	return &NS{Name: name, handle: h}, nil
}

// Delete removes the namespace; processes still in it keep it alive until
// they exit.
func (n *NS) Delete() error {
	n.handle.Close()
	return netns.DeleteNamed(n.Name)
}

// Do runs fn on an OS thread inside the namespace. Sockets fn creates
// belong to the namespace for their whole life, whichever goroutine then
// uses them.
func (n *NS) Do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	if err := netns.Set(n.handle); err != nil {
		return fmt.Errorf("enter namespace %s: %w", n.Name, err)
	}
	defer netns.Set(orig)
	return fn()
}

// Listen opens a TCP listener inside the namespace.
func (n *NS) Listen(addr string) (net.Listener, error) {
	var l net.Listener
	err := n.Do(func() (err error) { l, err = net.Listen("tcp", addr); return err })
	return l, err
}

// Dial connects from inside the namespace.
func (n *NS) Dial(addr string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() (err error) { c, err = net.Dial("tcp", addr); return err })
	return c, err
}

// Veth joins two namespaces with a veth pair: aName in a with aAddr, bName
// in b with bAddr (CIDR notation, e.g. 198.18.0.1/24). Deleting either
// namespace removes the pair.
func Veth(a *NS, aName string, aAddr netip.Prefix, b *NS, bName string, bAddr netip.Prefix) error {
	return VethQueues(a, aName, aAddr, b, bName, bAddr, 1)
}

// VethQueues is Veth with queues TX and RX queues at each end: a
// multi-queue device, as a NIC with a queue per CPU.
func VethQueues(a *NS, aName string, aAddr netip.Prefix, b *NS, bName string, bAddr netip.Prefix, queues int) error {
	var err error
	doErr := a.Do(func() error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: aName, MTU: 1500, NumTxQueues: queues, NumRxQueues: queues},
			PeerName: bName, PeerNamespace: netlink.NsFd(b.handle), PeerNumTxQueues: uint32(queues), PeerNumRxQueues: uint32(queues)}
		if err = netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth %s/%s: %w", aName, bName, err)
		}
		return configure(aName, aAddr)
	})
	if doErr != nil {
		return doErr
	}
	return b.Do(func() error { return configure(bName, bAddr) })
}

func configure(name string, addr netip.Prefix) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	ipnet := &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), addr.Addr().BitLen())}
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipnet}); err != nil {
		return fmt.Errorf("address %s on %s: %w", addr, name, err)
	}
	return netlink.LinkSetUp(l)
}

// Index returns an interface's index inside the namespace.
func (n *NS) Index(name string) (int, error) {
	var idx int
	err := n.Do(func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		idx = l.Attrs().Index
		return nil
	})
	return idx, err
}

// Pair is the usual two-host topology: a broker namespace and a client
// namespace joined by one veth pair on 198.18.0.0/24.
type Pair struct {
	Broker, Client       *NS
	BrokerDev, ClientDev string
	BrokerIP, ClientIP   netip.Addr
}

// NewPair builds a Pair for a test and removes it at cleanup.
func NewPair(t testing.TB) *Pair {
	t.Helper()
	p, err := CreatePair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Delete(); err != nil {
			t.Errorf("delete namespaces: %v", err)
		}
	})
	return p
}

// CreatePair builds a Pair; the caller must Delete it.
func CreatePair() (*Pair, error) { return CreatePairQueues(1) }

// CreatePairQueues is CreatePair with a multi-queue veth (queues TX and RX
// queues at each end), as a NIC with a queue per CPU.
func CreatePairQueues(queues int) (*Pair, error) {
	sfx := Suffix()
	p := &Pair{
		BrokerDev: "slb" + sfx,
		ClientDev: "slc" + sfx,
		BrokerIP:  netip.MustParseAddr("198.18.0.1"),
		ClientIP:  netip.MustParseAddr("198.18.0.2"),
	}
	var err error
	if p.Broker, err = Create(Prefix + "b-" + sfx); err != nil {
		return nil, err
	}
	if p.Client, err = Create(Prefix + "c-" + sfx); err != nil {
		p.Broker.Delete()
		return nil, err
	}
	if err := VethQueues(p.Broker, p.BrokerDev, netip.PrefixFrom(p.BrokerIP, 24), p.Client, p.ClientDev, netip.PrefixFrom(p.ClientIP, 24), max(queues, 1)); err != nil {
		p.Delete()
		return nil, err
	}
	return p, nil
}

// Delete removes both namespaces (and so the veth pair).
func (p *Pair) Delete() error {
	var first error
	for _, ns := range []*NS{p.Client, p.Broker} {
		if ns == nil {
			continue
		}
		if err := ns.Delete(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// RequireRoot fails the test, never skips it, when not run as root (make
// test must not pass quietly without its privileged tests), and lifts the
// memlock limit for BPF maps. why says what the test needs root for.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test %s: it needs root (CI runs make test as root)", why)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
}
