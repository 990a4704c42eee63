package maps

import (
	"bytes"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// onCPU runs fn on the given CPU: BPF_PROG_TEST_RUN runs a program on the
// calling thread's CPU, so this picks the flow cache fn's segments meet.
func onCPU(t testing.TB, cpu int, fn func()) {
	t.Helper()
	if runtime.NumCPU() < 2 {
		t.Fatalf("the flow cache tests need two CPUs, this machine has %d", runtime.NumCPU())
	}
	if err := pinned(cpu, fn); err != nil {
		t.Fatal(err)
	}
}

// pinned runs fn on one CPU: on its OS thread, pinned there meanwhile.
func pinned(cpu int, fn func()) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var was, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		return err
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to CPU %d: %w", cpu, err)
	}
	defer unix.SchedSetaffinity(0, &was)
	fn()
	return nil
}

// flowScript plays one client's life on a connection, switching CPUs
// between segments, and returns everything the data path left that anyone
// reads: each segment's verdict and class, counters, statistics, samples.
func flowScript(t *testing.T, opts Options) string {
	h := newHarness(t, opts)
	h.d.SetSettings(Settings{Shaper: ShaperHTB, IFBIndex: 1, StaleAfter: time.Hour, SamplesPerSecond: 1000})
	h.d.Heartbeat(MonotonicNow())
	h.d.SetClass(Produce, 5, 0x10005)
	h.d.SetClass(Fetch, 7, 0x10007)
	h.d.SetClass(Produce, 6, 0x10006)
	rd, err := h.d.NewSampleReader()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var out bytes.Buffer
	key := connKey(client4, broker4, 43000)
	onCPU(t, 0, func() { h.handshake(client4, broker4, 43000, 1000) })
	seq, segment := uint32(1001), 0
	send := func(data []byte, size int) {
		for len(data) > 0 {
			n := min(size, len(data))
			onCPU(t, segment/3%2, func() { // three segments per CPU, then the other
				v, prio := h.run(Produce, toBroker(client4, broker4, 43000, seq, flagACK|flagPSH, data[:n]))
				fmt.Fprintf(&out, "in %d: %d %#x\n", seq, v, prio)
				v, prio = h.run(Fetch, fromBroker(client4, broker4, 43000, 1, make([]byte, 50)))
				fmt.Fprintf(&out, "out: %d %#x\n", v, prio)
			})
			seq += uint32(n)
			data = data[n:]
			segment++
		}
	}
	stream := bytes.Join(kafkaRequests(), nil)
	send(stream, 100) // unbound: tracked and sampled
	if err := h.d.BindConns([]Binding{{Conn: key, Produce: 5, Fetch: 7}}); err != nil {
		t.Fatal(err)
	}
	send(stream, 7) // size fields and headers cut everywhere
	send(stream, 1000)
	resent := seq - 300
	onCPU(t, 1, func() { // a retransmission across a request start
		v, prio := h.run(Produce, toBroker(client4, broker4, 43000, resent, flagACK|flagPSH, stream[len(stream)-300:]))
		fmt.Fprintf(&out, "resent %d: %d %#x\n", resent, v, prio)
	})
	if err := h.d.BindConns([]Binding{{Conn: key, Produce: 6, Fetch: 7}}); err != nil {
		t.Fatal(err)
	}
	send(stream, 333)
	seq += 5000 // a gap: the stream is found again at a request start
	send(stream, 400)
	if err := h.d.ForgetConns([]ConnKey{key}); err != nil {
		t.Fatal(err)
	}
	send(stream[:500], 100)
	onCPU(t, 1, func() { h.run(Produce, toBroker(client4, broker4, 43000, seq, flagACK|flagFIN, nil)) })

	for _, dir := range []Direction{Produce, Fetch} {
		for _, entity := range []uint32{EntityUnknown, 5, 6, 7} {
			fmt.Fprintf(&out, "counters %v %d: %+v\n", dir, entity, h.counters(dir, entity))
		}
	}
	st, err := h.d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&out, "stats %+v\n", st)
	for _, s := range drain(t, rd) {
		fmt.Fprintf(&out, "sample %d %x complete %v bound %+v\n", s.Seq, s.Data, s.Complete, s.Bound)
	}
	return out.String()
}

// The flow cache changes nothing anyone can see: a connection whose
// segments move between CPUs while it is bound, rebound, forgotten and
// resent to is counted, classified, tracked and sampled exactly as by the
// connection table alone.
func TestFlowCacheMatchesTheTableAcrossCPUs(t *testing.T) {
	withCache := flowScript(t, testOptions())
	opts := testOptions()
	opts.noFlowCache = true
	tableOnly := flowScript(t, opts)
	if withCache != tableOnly {
		a, b := bytes.Split([]byte(withCache), []byte("\n")), bytes.Split([]byte(tableOnly), []byte("\n"))
		for i := range min(len(a), len(b)) {
			if !bytes.Equal(a[i], b[i]) {
				t.Fatalf("line %d differs:\n with the cache: %s\n table only:     %s", i+1, a[i], b[i])
			}
		}
		t.Fatalf("outputs differ in length: %d and %d lines", len(a), len(b))
	}
	if !bytes.Contains([]byte(withCache), []byte("sample ")) {
		t.Fatal("the script sampled nothing: it tests no tracking")
	}
}

// Every change to a connection's entry reaches the very next segment on
// every CPU, however recently each CPU cached the entry.
func TestFlowCacheSeesEveryChangeAtOnce(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			h := newHarness(t, testOptions())
			key := connKey(fam.client, fam.broker, 43100)
			seq := uint32(1)
			// segmentOn sends 100 bytes each way on cpu and says where they were counted.
			segmentOn := func(cpu int) (produce, fetch uint32) {
				before := map[Direction]map[uint32]uint64{Produce: {}, Fetch: {}}
				for _, d := range []Direction{Produce, Fetch} {
					for _, e := range []uint32{EntityUnknown, 5, 6, 7, 8} {
						before[d][e] = h.counters(d, e).Bytes
					}
				}
				onCPU(t, cpu, func() {
					h.run(Fetch, fromBroker(fam.client, fam.broker, 43100, 1, make([]byte, 100)))
					h.run(Produce, toBroker(fam.client, fam.broker, 43100, seq, flagACK, make([]byte, 100)))
				})
				seq += 100
				produce, fetch = 99, 99
				for _, e := range []uint32{EntityUnknown, 5, 6, 7, 8} {
					if h.counters(Produce, e).Bytes == before[Produce][e]+100 {
						produce = e
					}
					if h.counters(Fetch, e).Bytes == before[Fetch][e]+100 {
						fetch = e
					}
				}
				return produce, fetch
			}
			expect := func(step string, produce, fetch uint32) {
				t.Helper()
				for _, cpu := range []int{0, 1} {
					// Twice on each CPU: the first fills its cache, the second is served by it.
					for range 2 {
						if p, f := segmentOn(cpu); p != produce || f != fetch {
							t.Fatalf("%s, CPU %d: counted to %d/%d, want %d/%d", step, cpu, p, f, produce, fetch)
						}
					}
				}
			}
			bind := func(produce, fetch uint32) {
				if err := h.d.BindConns([]Binding{{Conn: key, Produce: produce, Fetch: fetch}}); err != nil {
					t.Fatal(err)
				}
			}
			expect("new connection", EntityUnknown, EntityUnknown)
			bind(5, 7)
			expect("bound", 5, 7)
			bind(6, 8)
			expect("rebound", 6, 8)
			if err := h.d.ForgetConns([]ConnKey{key}); err != nil {
				t.Fatal(err)
			}
			expect("forgotten", EntityUnknown, EntityUnknown)
			bind(5, 7)
			expect("bound again", 5, 7)
			// A new connection on the same 4-tuple: the broker's SYN-ACK, on
			// one CPU, replaces what every CPU cached.
			onCPU(t, 1, func() {
				h.run(Fetch, segment{src: netip.AddrPortFrom(fam.broker, brokerPort), dst: netip.AddrPortFrom(fam.client, 43100), seq: 7, ack: seq, flags: flagSYN | flagACK})
			})
			expect("4-tuple reused", EntityUnknown, EntityUnknown)
		})
	}
}

// A change the cache is not told of (the LRU dropping an entry) is seen
// within a jiffy: each CPU looks the table up again once a jiffy.
func TestFlowCacheLooksAgainEachJiffy(t *testing.T) {
	h := newHarness(t, testOptions())
	key := connKey(client4, broker4, 43200)
	if err := h.d.BindConns([]Binding{{Conn: key, Produce: 5, Fetch: 7}}); err != nil {
		t.Fatal(err)
	}
	// The broker's segments: never tracked, so the cache serves them all.
	send := func() {
		onCPU(t, 0, func() { h.run(Fetch, fromBroker(client4, broker4, 43200, 1, make([]byte, 100))) })
	}
	send()
	send()
	if c := h.counters(Fetch, 7); c.Bytes != 200 {
		t.Fatalf("bound connection counted %+v to its entity, want 200 bytes", c)
	}
	// What the LRU does when it evicts: the entry goes, nobody is told.
	table, raw := h.d.table(key)
	if err := table.Delete(raw); err != nil {
		t.Fatal(err)
	}
	// A jiffy is at most 10 ms (HZ ≥ 100); a second is a hundred of them.
	// The broker's next segment after that enters the connection anew.
	deadline := time.Now().Add(time.Second)
	for h.counters(Fetch, EntityUnknown).Bytes == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a second after its entry went, the connection is still counted to its old entity (%+v)", h.counters(Fetch, 7))
		}
		send()
	}
}
