package maps

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
	"github.com/sluice-dev/sluice/internal/netns"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// BenchmarkDatapath measures the per-packet cost in the kernel with
// BPF_PROG_TEST_RUN (prog.Benchmark): the kernel's own mean per run is
// reported as ns/op.
//
//   - ungoverned: a segment for another port (the cost every other packet pays)
//   - governed: an attributed connection's segment in the middle of a request,
//     served by the flow cache (every segment of a flow but its first on a
//     CPU in each jiffy)
//   - governed-table: the same with the flow cache off: what the first
//     segment in a jiffy pays, less filling the cache
//   - governed-shaped: the same with an HTB class (classified, redirected to the IFB)
//   - governed-egress: an attributed connection's segment from the broker
//   - request-start: a segment that starts a request that is sampled, into
//     a slot in no cache (BenchmarkRequestStartAgentRing and
//     BenchmarkRequestStartDrained place it where the agent leaves it)
//   - request-start-unsampled: a segment that starts a request the
//     connection's sample budget does not cover (spent): tracked, not
//     sampled, as most request starts of a busy connection are
//   - request-start-cut: request-start with a 1000-byte client-id, sampled
//     as its header, the client-id's kept head and what follows
//   - position-probed: a segment of a connection that lost its request
//     position, probed for a request start (budget allowing): its first
//     256 offsets checked for a header, none plausible (zeros), the worst
//     a stream of junk costs per probed segment
//   - position-lost: the same with the sample budget spent: only the
//     segment's start is checked, what every segment of such a stream costs
//   - response-start: an egress segment at which a response starts, no
//     request of the connection pending: response tracking follows the
//     boundary (bpf/latency.h)
//   - response-start-measured: the same, answering the connection's pending
//     sampled request: its measurement is published to the agent through
//     this CPU's latency ring, into a slot in no cache as request-start's.
//     A measured response should cost no more than a sampled request start
//     (issue #34); read it against request-start, in the same run.
func BenchmarkDatapath(b *testing.B) {
	netns.RequireRoot(b, "loads BPF programs")
	payload := make([]byte, 1400)
	// bound enters the benchmark's connection, bound to entity 5 both ways.
	bound := func(h *harness) {
		h.d.BindConns([]Binding{{Conn: connKey(client4, broker4, 40000), Produce: 5, Fetch: 5}})
	}
	midRequest := toBroker(client4, broker4, 40000, 100, flagACK|flagPSH, payload)
	cases := []struct {
		name  string
		opts  func(*Options)
		setup func(*harness)
		seg   segment
	}{
		{
			name: "ungoverned",
			seg:  segment{src: netipPort(client4, 40000), dst: netipPort(broker4, 22), seq: 1, flags: flagACK, payload: payload},
		},
		{
			name:  "governed",
			setup: func(h *harness) { bound(h); syncOnLongRequest(h) },
			seg:   midRequest,
		},
		{
			name:  "governed-table",
			opts:  func(o *Options) { o.noFlowCache = true },
			setup: func(h *harness) { bound(h); syncOnLongRequest(h) },
			seg:   midRequest,
		},
		{
			// governed, and the entity has an HTB class: the segment is
			// classified and redirected to the IFB.
			name:  "governed-shaped",
			setup: func(h *harness) { bound(h); h.d.SetClass(Produce, 5, 0x10005); syncOnLongRequest(h) },
			seg:   midRequest,
		},
		{
			name:  "governed-egress",
			setup: bound,
			seg:   fromBroker(client4, broker4, 40000, 100, payload),
		},
		{
			name:  "request-start",
			opts:  requestStartOptions,
			setup: func(h *harness) { enterBound(h, 40000) },
			seg:   requestStart(40000),
		},
		{
			name: "request-start-unsampled",
			opts: func(o *Options) { requestStartOptions(o); o.FirstRequestsSampled = 0 },
			setup: func(h *harness) {
				enterBound(h, 40000)
				h.d.SetSettings(Settings{Shaper: ShaperHTB, IFBIndex: 1, StaleAfter: 10 * time.Second, SamplesPerSecond: 0})
			},
			seg: requestStart(40000),
		},
		{
			name:  "position-probed",
			opts:  func(o *Options) { o.benchRewind = true },
			setup: func(h *harness) { positionLost(h, 40000) },
			seg:   toBroker(client4, broker4, 40000, 100, flagACK|flagPSH, payload),
		},
		{
			name: "position-lost",
			opts: func(o *Options) { o.benchRewind = true },
			setup: func(h *harness) {
				positionLost(h, 40000)
				h.d.SetSettings(Settings{Shaper: ShaperHTB, IFBIndex: 1, StaleAfter: 10 * time.Second, SamplesPerSecond: 0})
			},
			seg: toBroker(client4, broker4, 40000, 100, flagACK|flagPSH, payload),
		},
		{
			name:  "response-start",
			opts:  func(o *Options) { o.benchRewind = true },
			setup: func(h *harness) { responseTracked(h, 40000, false) },
			seg:   responseStart(40000),
		},
		{
			name: "response-start-measured",
			// Room for every measurement of a batch, as request-start has
			// for its samples.
			opts:  func(o *Options) { o.benchRewind = true; o.latencySlotsPerCPU = 32768 },
			setup: func(h *harness) { responseTracked(h, 40000, true) },
			seg:   responseStart(40000),
		},
		{
			name: "request-start-cut",
			// Three fragments a run (the kept head, the hash of the
			// 872 client-id bytes cut, the rest): room for every one of
			// a batch.
			opts:  func(o *Options) { requestStartOptions(o); o.SampleSlotsPerCPU = 65536 },
			setup: func(h *harness) { enterBound(h, 40000) },
			seg:   requestStartCut(40000),
		},
	}
	// Calibration: an empty TC program in the same run, so the per-packet
	// figures can be read against the machine's floor (14 ns when the goals
	// were set).
	b.Run("empty-program", func(b *testing.B) {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Type:         ebpf.SchedCLS,
			License:      "MIT",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()},
		})
		if err != nil {
			b.Fatal(err)
		}
		defer prog.Close()
		frame := segment{src: netipPort(client4, 40000), dst: netipPort(broker4, 22), seq: 1, flags: flagACK, payload: payload}.frame()
		var total time.Duration
		runs := 0
		for b.Loop() {
			_, per, err := prog.Benchmark(frame, 20000, nil)
			if err != nil {
				b.Fatal(err)
			}
			total += per
			runs++
		}
		b.ReportMetric(float64(total.Nanoseconds())/float64(runs), "ns/pkt")
	})
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			opts := testOptions()
			if c.opts != nil {
				c.opts(&opts)
			}
			h := newHarness(b, opts)
			benchLive(h)
			if c.setup != nil {
				c.setup(h)
			}
			rd, err := h.d.NewSampleReader()
			if err != nil {
				b.Fatal(err)
			}
			defer rd.Close()
			lr, err := h.d.NewLatencyReader()
			if err != nil {
				b.Fatal(err)
			}
			defer lr.Close()
			frame := c.seg.frame()
			// Runs per syscall: enough that the first run's cold caches
			// do not count (at 256, ~50 ns a packet); a CPU's sample ring
			// (and latency ring) holds them all.
			const repeat = 20000
			var total time.Duration
			runs := 0
			for b.Loop() {
				prog := h.d.IngressProgram()
				if c.seg.src.Port() == brokerPort {
					prog = h.d.EgressProgram()
				}
				// A signal interrupts a run and the library starts it
				// again from the first repetition: drain what the
				// interrupted part sampled and measured, or the rings
				// overflow.
				_, per, err := prog.Benchmark(frame, repeat, func() { drainQuiet(rd); drainLatencyQuiet(lr) })
				if err != nil {
					b.Fatal(err)
				}
				total += per
				runs++
				b.StopTimer()
				drainQuiet(rd)
				drainLatencyQuiet(lr)
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(runs), "ns/pkt")
			st, _ := h.d.Stats()
			switch c.name {
			case "request-start", "request-start-cut":
				if st.Samples == 0 || st.RingBufferDrops != 0 {
					b.Fatalf("%s benchmark sampled %d and dropped %d: it must measure sending every sample", c.name, st.Samples, st.RingBufferDrops)
				}
			case "response-start-measured":
				if st.LatencyEvents == 0 || st.LatencyDrops != 0 {
					b.Fatalf("%s measured %d and dropped %d: it must measure sending every measurement", c.name, st.LatencyEvents, st.LatencyDrops)
				}
			case "response-start":
				if st.ResponseDesyncs != 0 || st.LatencyEvents != 0 {
					b.Fatalf("%s: %d desyncs, %d measurements: it must follow a response start and measure nothing", c.name, st.ResponseDesyncs, st.LatencyEvents)
				}
			case "position-probed", "position-lost":
				if st.Samples != 0 {
					b.Fatalf("%s sampled %d: it must find no request start in zeros", c.name, st.Samples)
				}
			case "request-start-unsampled":
				if st.Samples != 0 || st.BudgetDrops == 0 {
					b.Fatalf("request-start-unsampled sampled %d (budget drops %d): it must measure request starts the budget does not cover", st.Samples, st.BudgetDrops)
				}
			}
		})
	}
}

// positionLost enters the client's connection from port, bound to entity
// 5, with its request position lost at sequence 100 (the newest byte seen
// then): the next segment is probed for a request start.
func positionLost(h *harness, port uint16) {
	enterBound(h, port)
	_, key := h.d.table(connKey(client4, broker4, port))
	var st sluiceConnState
	if err := h.d.objs.Conns4.Lookup(key, &st); err != nil {
		h.t.Fatal(err)
	}
	st.Track.Synced, st.Track.Regain, st.Track.SizePartial = 0, 1, 100 // REGAIN_SEARCHING, lost_end
	if err := h.d.objs.Conns4.Put(key, &st); err != nil {
		h.t.Fatal(err)
	}
}

// responseTracked enters the client's connection from port, bound to
// entity 5, with its response stream followed from sequence 100 (as if an
// earlier response had synchronised it) and, when pending, a produce
// request with correlation id 7 awaiting its answer.
func responseTracked(h *harness, port uint16, pending bool) {
	enterBound(h, port)
	_, key := h.d.table(connKey(client4, broker4, port))
	var st sluiceConnState
	if err := h.d.objs.Conns4.Lookup(key, &st); err != nil {
		h.t.Fatal(err)
	}
	st.Lat.RespSynced, st.Lat.RespSeq = 1, 100
	if pending {
		st.Lat.FirstNs, st.Lat.LastNs, st.Lat.CorrId = uint64(MonotonicNow()), uint64(MonotonicNow()), 7
	}
	if err := h.d.objs.Conns4.Put(key, &st); err != nil {
		h.t.Fatal(err)
	}
}

// responseStart is a full-sized egress segment at sequence 100 of the
// connection from port that starts a response to correlation id 7.
func responseStart(port uint16) segment {
	return fromBroker(client4, broker4, port, 100, kafkaResp(7, 1400-8))
}

func drainLatencyQuiet(r *LatencyReader) {
	for {
		r.SetDeadline(time.Now())
		if _, err := r.Read(); err != nil {
			return
		}
	}
}

// requestStartOptions make a program that starts a request at every run,
// with room to sample every one of a benchmark batch.
func requestStartOptions(o *Options) {
	o.benchRewind = true
	o.SampleSlotsPerCPU = 32768
}

// benchLive makes the data path live as the agent runs it: htb, a fresh
// heartbeat, and a sample budget no benchmark spends.
func benchLive(h *harness) {
	h.d.SetSettings(Settings{Shaper: ShaperHTB, IFBIndex: 1, StaleAfter: 10 * time.Second, SamplesPerSecond: 1 << 30})
	h.d.Heartbeat(MonotonicNow())
}

// enterBound enters the client's connection from port (the broker's ACK
// proves it; tracking starts at sequence 100) and binds it to entity 5
// both ways.
func enterBound(h *harness, port uint16) {
	h.run(Fetch, brokerACK(client4, broker4, port, 100))
	h.d.BindConns([]Binding{{Conn: connKey(client4, broker4, port), Produce: 5, Fetch: 5}})
}

// requestStart is a full-sized segment at sequence 100 of the client's
// connection from port that starts a produce request longer than a sample.
func requestStart(port uint16) segment {
	req := kafkaRequests()[1]
	return toBroker(client4, broker4, port, 100, flagACK|flagPSH, append(append([]byte{}, req...), make([]byte, 1400)...)[:1400])
}

// requestStartCut is requestStart with a 1000-byte client-id: its sample
// is cut (ClientIDKept), and the 872 bytes cut are hashed.
func requestStartCut(port uint16) segment {
	id := string(make([]byte, 1000))
	req := kt.Frame(kt.Produce(9, kt.TP{Topic: "orders", Partitions: []int32{0}}), 1, &id)
	return toBroker(client4, broker4, port, 100, flagACK|flagPSH, append(append([]byte{}, req...), make([]byte, 1400)...)[:1400])
}

// requestStartBench loads a data path for request-start benchmarks with
// slots sample slots per CPU, live, the client's connection from port
// 40000 entered and bound, and opens its sample reader.
func requestStartBench(b *testing.B, slots int) (*harness, *SampleReader) {
	netns.RequireRoot(b, "loads BPF programs")
	opts := testOptions()
	requestStartOptions(&opts)
	opts.SampleSlotsPerCPU = slots
	h := newHarness(b, opts)
	benchLive(h)
	enterBound(h, 40000)
	rd, err := h.d.NewSampleReader()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rd.Close() })
	return h, rd
}

// BenchmarkRequestStartAgentRing: request starts into the ring the agent
// runs with (DefaultOptions' slots per CPU), which a reader on the other
// CPU drains between batches of as many starts, as the agent's poll does.
// BenchmarkDatapath/request-start spreads its 20000 samples a batch over a
// 32768-slot ring (19 MB), so each start finds its slot in no cache; here
// the slot is wherever the agent's last read of it left it. The two bound
// what a sampled request start costs a broker: the slot's lines are the
// difference (bpf/types.h, struct sample).
func BenchmarkRequestStartAgentRing(b *testing.B) {
	slots := DefaultOptions().SampleSlotsPerCPU
	h, rd := requestStartBench(b, slots)
	frame := requestStart(40000).frame()
	var total time.Duration
	runs := 0
	for b.Loop() {
		var per time.Duration
		var runErr error
		err := pinned(0, func() {
			_, per, runErr = h.d.IngressProgram().Benchmark(frame, slots, func() { drainQuiet(rd) })
		})
		if err = errors.Join(err, runErr); err != nil {
			b.Fatal(err)
		}
		total += per
		runs++
		b.StopTimer()
		if err := pinned(1, func() { drainQuiet(rd) }); err != nil { // the agent's CPU
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(runs), "ns/pkt")
	if st, _ := h.d.Stats(); st.Samples == 0 || st.RingBufferDrops != 0 {
		b.Fatalf("sampled %d and dropped %d: the benchmark must measure sending every sample", st.Samples, st.RingBufferDrops)
	}
}

// BenchmarkRequestStartTwoCPUs: both CPUs start requests at once, each on
// a connection of its own, as a broker's CPUs do. Sampling must not
// serialise them: a request start should cost about what it costs on one
// CPU alone (BenchmarkDatapath/request-start in the same run).
func BenchmarkRequestStartTwoCPUs(b *testing.B) {
	netns.RequireRoot(b, "loads BPF programs")
	opts := testOptions()
	requestStartOptions(&opts)
	h := newHarness(b, opts)
	benchLive(h)
	var frames [2][]byte
	for cpu := range frames {
		port := uint16(40000 + cpu)
		enterBound(h, port)
		frames[cpu] = requestStart(port).frame()
	}
	rd, err := h.d.NewSampleReader()
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	var drainMu sync.Mutex
	drain := func() { drainMu.Lock(); drainQuiet(rd); drainMu.Unlock() }
	const repeat = 20000
	var total time.Duration
	runs := 0
	for b.Loop() {
		var per [2]time.Duration
		errs := make(chan error, 2)
		for cpu := range frames {
			go func() {
				var runErr error
				err := pinned(cpu, func() {
					_, per[cpu], runErr = h.d.IngressProgram().Benchmark(frames[cpu], repeat, drain)
				})
				errs <- errors.Join(err, runErr)
			}()
		}
		for range frames {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		total += (per[0] + per[1]) / 2
		runs++
		b.StopTimer()
		drainQuiet(rd)
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(runs), "ns/pkt")
	if st, _ := h.d.Stats(); st.RingBufferDrops != 0 {
		b.Fatalf("dropped %d samples: the benchmark must measure sending every one", st.RingBufferDrops)
	}
}

// BenchmarkRequestStartDrained: request starts on CPU 0 while CPU 1 takes
// every fragment out of the rings as it is published, as the agent does:
// each sample's cache lines then travel to the reader and back, the cost a
// broker pays that the ring-filling benchmarks above do not show (their
// slots stay on one CPU). The reader decodes slots as poll does (the header
// and the fragment's bytes) and moves tails, nothing more, so that it keeps
// up; what it still misses is reported as drops.
func BenchmarkRequestStartDrained(b *testing.B) {
	h, rd := requestStartBench(b, 4096) // the reader frees slots: a ring nearer the agent's
	var stop atomic.Bool
	reader := make(chan error, 1)
	go func() {
		reader <- pinned(1, func() {
			data := make([]byte, SampleMax)
			for !stop.Load() {
				for cpu := 0; cpu < rd.cpus; cpu++ {
					head, tail := rd.ring(cpu)
					end := atomic.LoadUint64(head)
					for next := atomic.LoadUint64(tail); next != end; next++ {
						// What poll reads: the header and the fragment's bytes.
						if f, err := decodeFragment(rd.slot(cpu, next)); err == nil {
							copy(data, f.data)
						}
					}
					atomic.StoreUint64(tail, end)
				}
			}
		})
	}()
	frame := requestStart(40000).frame()
	const repeat = 20000
	var total time.Duration
	runs := 0
	for b.Loop() {
		var per time.Duration
		var runErr error
		if err := pinned(0, func() { _, per, runErr = h.d.IngressProgram().Benchmark(frame, repeat, nil) }); err != nil || runErr != nil {
			b.Fatal(errors.Join(err, runErr))
		}
		total += per
		runs++
	}
	stop.Store(true)
	if err := <-reader; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(runs), "ns/pkt")
	if st, err := h.d.Stats(); err == nil && st.Samples > 0 {
		b.ReportMetric(float64(st.RingBufferDrops)/float64(st.Samples+st.RingBufferDrops), "drops/sample")
	}
}

// syncOnLongRequest locks tracking on a request far longer than the
// benchmark's segments, which then all fall in its middle.
func syncOnLongRequest(h *harness) {
	big := append([]byte{0x04, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1, 0, 1}, make([]byte, 64)...)
	h.run(Produce, toBroker(client4, broker4, 40000, 1, flagACK, big))
}

// drainQuiet empties the sample rings between benchmark batches.
func drainQuiet(r *SampleReader) {
	for {
		r.SetDeadline(time.Now().Add(time.Millisecond))
		if _, err := r.Read(); err != nil {
			return
		}
	}
}
