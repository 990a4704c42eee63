package datapath_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/sluice-dev/sluice/agent/attach"
	"github.com/sluice-dev/sluice/internal/netns"
	"github.com/sluice-dev/sluice/maps"
)

// The edt shaper's departure times must reach the qdisc that releases
// them: on ingress they must survive the redirect to the IFB, on egress
// they must leave sluice's program. A probe program records the tstamp and
// its type of each payload segment where fq would take it (the IFB's
// egress hook; the device's egress hook after sluice's program). Each must
// be the departure time sluice assigned on the entity's clock, of the
// monotonic delivery type fq honours. No fq is needed: the probe sees what
// fq would.
func TestEDTDepartureTimesReachTheQdisc(t *testing.T) {
	for _, dir := range []maps.Direction{maps.Produce, maps.Fetch} {
		t.Run(map[maps.Direction]string{maps.Produce: "produce-ingress", maps.Fetch: "fetch-egress"}[dir], func(t *testing.T) { edtTstamp(t, dir) })
	}
}

func edtTstamp(t *testing.T, dir maps.Direction) {
	netns.RequireRoot(t, "builds network namespaces and loads BPF programs")
	pair := netns.NewPair(t)
	d := attached(t, pair, attach.TCX)
	const entity, rate = 5, 1_000_000 // bytes/s: a 1000-byte segment is 1 ms of clock
	var ifb netlink.Link
	devIndex, err := pair.Broker.Index(pair.BrokerDev)
	if err != nil {
		t.Fatal(err)
	}
	if err := pair.Broker.Do(func() error {
		if err := netlink.LinkAdd(&netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: "slprobeifb"}}); err != nil {
			return err
		}
		var err error
		if ifb, err = netlink.LinkByName("slprobeifb"); err != nil {
			return err
		}
		return netlink.LinkSetUp(ifb)
	}); err != nil {
		t.Fatal(err)
	}
	// Where the probe sits: the IFB's egress for produce; the device's
	// egress, after sluice's program, for fetch.
	at := ifb.Attrs().Index
	if dir == maps.Fetch {
		at = devIndex
	}
	probe := newTstampProbe(t)
	var l link.Link
	if err := pair.Broker.Do(func() (err error) {
		l, err = link.AttachTCX(link.TCXOptions{Interface: at, Program: probe.prog, Attach: ebpf.AttachTCXEgress, Anchor: link.Tail()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := d.SetEntityRates(dir, []maps.EntityRate{{Entity: entity, BytesPerSecond: rate}}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetSettings(maps.Settings{Shaper: maps.ShaperEDT, IFBIndex: ifb.Attrs().Index, StaleAfter: time.Hour,
		SamplesPerSecond: 200, Horizon: 10 * time.Second, ECNThreshold: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := d.Heartbeat(maps.MonotonicNow()); err != nil {
		t.Fatal(err)
	}

	broker := netip.AddrPortFrom(pair.BrokerIP, 9092)
	ln, err := pair.Broker.Listen(broker.String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const segments, size = 20, 1000
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err := pair.Client.Dial(broker.String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	defer server.Close()
	local := netip.MustParseAddrPort(client.LocalAddr().String())
	if err := d.BindConns([]maps.Binding{{Conn: maps.ConnKey{Peer: local, Local: broker}, Produce: entity, Fetch: entity}}); err != nil {
		t.Fatal(err)
	}
	sender, receiver := client, server // produce: client → broker
	if dir == maps.Fetch {
		sender, receiver = server, client
	}
	sender.(*net.TCPConn).SetNoDelay(true)
	received := make(chan error, 1)
	go func() { _, err := io.CopyN(io.Discard, receiver, segments*size); received <- err }()
	for range segments {
		if _, err := sender.Write(make([]byte, size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-received; err != nil {
		t.Fatal(err)
	}
	got := probe.read(t)
	clock, err := d.DepartureClock(dir, entity)
	if err != nil {
		t.Fatal(err)
	}
	// The last segment's payload: the frame less Ethernet, IPv4 and TCP
	// with timestamps.
	payload := int64(got.Len) - (14 + 20 + 32)
	assigned := clock - time.Duration(payload*1e9/rate)
	t.Logf("%s: the probe saw %d segments; the last: tstamp %d (type %d), %d payload bytes; sluice assigned it %d (its clock now %d)",
		t.Name(), got.Count, got.Tstamp, got.Type, payload, assigned, clock)
	if got.Count == 0 {
		t.Fatal("no payload segment reached the probe")
	}
	if time.Duration(got.Tstamp) != assigned {
		t.Errorf("the probe saw tstamp %d, sluice assigned %d: the departure time did not reach the qdisc", got.Tstamp, assigned)
	}
	if got.Type != tstampMono {
		t.Errorf("tstamp type %d, want %d (monotonic delivery time, which fq honours)", got.Type, tstampMono)
	}
}

// tstampMono is BPF_SKB_TSTAMP_DELIVERY_MONO: skb->tstamp is a delivery
// time on CLOCK_MONOTONIC.
const tstampMono = 1

// tstampProbe is a TC program that records the last payload segment's
// tstamp, tstamp type and length (frames under 100 bytes are skipped:
// ACKs), and counts them, in a one-entry array.
type tstampProbe struct {
	prog *ebpf.Program
	seen *ebpf.Map
}

type probeRecord struct {
	Tstamp, Type, Len, Count uint64
}

func newTstampProbe(t *testing.T) *tstampProbe {
	t.Helper()
	// The __sk_buff fields' offsets, from the kernel's own BTF.
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatal(err)
	}
	var skb *btf.Struct
	if err := kernel.TypeByName("__sk_buff", &skb); err != nil {
		t.Fatal(err)
	}
	offset := map[string]int16{}
	for _, m := range skb.Members {
		offset[m.Name] = int16(m.Offset.Bytes())
	}
	for _, f := range []string{"tstamp", "tstamp_type", "len"} {
		if _, ok := offset[f]; !ok {
			t.Fatalf("__sk_buff has no %s on this kernel", f)
		}
	}
	seen, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 32, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { seen.Close() })
	insns := asm.Instructions{
		asm.LoadMem(asm.R6, asm.R1, offset["tstamp"], asm.DWord),
		asm.LoadMem(asm.R7, asm.R1, offset["tstamp_type"], asm.Byte),
		asm.LoadMem(asm.R8, asm.R1, offset["len"], asm.Word),
		asm.JLT.Imm(asm.R8, 100, "out"),
		asm.StoreImm(asm.R10, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, seen.FD()),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.StoreMem(asm.R0, 0, asm.R6, asm.DWord),
		asm.StoreMem(asm.R0, 8, asm.R7, asm.DWord),
		asm.StoreMem(asm.R0, 16, asm.R8, asm.DWord),
		asm.LoadMem(asm.R1, asm.R0, 24, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 24, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), // TC_ACT_OK
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL", Instructions: insns})
	if err != nil {
		t.Fatal(fmt.Errorf("load the tstamp probe: %w", err))
	}
	t.Cleanup(func() { prog.Close() })
	return &tstampProbe{prog: prog, seen: seen}
}

func (p *tstampProbe) read(t *testing.T) probeRecord {
	t.Helper()
	var r probeRecord
	if err := p.seen.Lookup(uint32(0), &r); err != nil {
		t.Fatal(err)
	}
	return r
}
