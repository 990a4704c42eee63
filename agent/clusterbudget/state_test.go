package clusterbudget

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/cluster"
)

// echoLog is a one-broker coordination topic: what is published is read
// back at the next drain, unless deaf (nothing lands: the lease anchor
// stands still). Each report is checked against the state file at the
// moment it is sent.
type echoLog struct {
	t       *testing.T
	path    string
	now     *time.Duration
	deaf    bool
	reports []cluster.Report
	sent    int
	// rewrites counts the reports sent after the file was written since
	// the previous report (its newest slot's sequence number moved).
	rewrites int
	lastSeq  uint64
}

func (l *echoLog) Publish(r *cluster.Report) {
	l.t.Helper()
	st, err := readClusterState(l.path)
	if err != nil || st == nil {
		l.t.Fatalf("report %d sent with no state file: %v", r.Seq, err)
	}
	// What the report promises must be on disk before it is sent.
	if st.Disk.Epoch != r.Epoch || st.Disk.ProcessedSent < r.Processed {
		l.t.Fatalf("report epoch %d processed %d sent; the file holds epoch %d processed %d", r.Epoch, r.Processed, st.Disk.Epoch, st.Disk.ProcessedSent)
	}
	if seq := newestSeq(l.t, l.path); seq != l.lastSeq {
		l.rewrites++
		l.lastSeq = seq
	}
	l.sent++
	c := *r
	c.Entities = slices.Clone(r.Entities)
	l.reports = append(l.reports, c)
}

func (l *echoLog) Drain(fn func(r *cluster.Report)) (time.Duration, bool) {
	if !l.deaf {
		for i := range l.reports {
			fn(&l.reports[i])
		}
	}
	l.reports = l.reports[:0]
	return *l.now, !l.deaf
}

func (l *echoLog) Stats() LogStats { return LogStats{CaughtUp: true} }
func (l *echoLog) Close()          {}

// A report rewrites the state file only when what it depends on changed:
// every report finds its epoch and highest processed round on disk, a
// lease anchor that only moved on is written at most once a refresh
// interval, an unchanged state is not rewritten at all, and what was
// written is what a restart reads.
func TestStateFileWrittenWhenPromisesChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.state")
	rate, resv := 300.0, 60.0
	cfg := config.Default()
	cfg.Cluster = config.Cluster{Enabled: true, Name: "c", BrokerID: 1, Brokers: []int32{1}, Mode: config.ModeEnforce,
		Lease: 3 * time.Second, MaxDelivery: time.Second, Fallback: config.FallbackEvenSplit, StateFile: path,
		Entities: config.ClusterEntities{Clients: map[string]config.ClusterQuota{"backfill": {ConsumerByteRate: &rate, ConsumerByteReservation: &resv}}}}
	var now time.Duration
	log := &echoLog{t: t, path: path, now: &now}
	cb, err := New(cfg, Link{Log: log}, now, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	const tick = 100 * time.Millisecond
	run := func(d time.Duration) {
		for end := now + d; now < end; {
			now += tick
			cb.Measure(0, 100, 100, false)
			cb.Tick(now, func(int, float64) error { return nil })
		}
	}
	run(10 * time.Second)
	if cb.core.Processed() == 0 || cb.core.Mode() != cluster.ModeNormal {
		t.Fatalf("no round processed (%d) or not normal (%v): the test does not exercise what it names", cb.core.Processed(), cb.core.Mode())
	}
	// Each round is a periodic report and its acknowledgement: the
	// acknowledgement's new processed round is written, the periodic
	// report's newer anchor alone is not.
	t.Logf("%d reports, the file written before %d", log.sent, log.rewrites)
	if log.rewrites*2 > log.sent+2 {
		t.Errorf("state file written before %d of %d reports; want about every second one (each round's promise)", log.rewrites, log.sent)
	}
	st, err := readClusterState(path)
	if err != nil {
		t.Fatal(err)
	}
	if disk := cb.core.Persist(); disk.Anchor-st.Disk.Anchor >= cfg.RefreshInterval || disk.ProcessedSent != st.Disk.ProcessedSent {
		t.Errorf("file holds anchor %v processed %d; the core %v %d: the anchor may lag less than %v, the promise not at all",
			st.Disk.Anchor, st.Disk.ProcessedSent, disk.Anchor, disk.ProcessedSent, cfg.RefreshInterval)
	}

	// Deaf, within the lease (3 s from the last anchor, under a second
	// old): no report lands, no round closes, nothing on disk changes; the
	// periodic reports go out without replacing the file.
	log.deaf = true
	before, rewrites, sent := st.Disk, log.rewrites, log.sent
	run(1500 * time.Millisecond)
	if log.sent == sent || log.rewrites != rewrites || cb.core.Mode() != cluster.ModeNormal {
		t.Errorf("unchanged state: %d reports sent, file written %d times, mode %v; want reports, no rewrite, normal", log.sent-sent, log.rewrites-rewrites, cb.core.Mode())
	}
	// Past the lease it falls back: a change of mode is written.
	run(2 * time.Second)
	if cb.core.Mode() != cluster.ModeFallback || log.rewrites == rewrites {
		t.Errorf("mode %v, file written %d times after the lease; want fallback written", cb.core.Mode(), log.rewrites-rewrites)
	}

	// A restart reads what the file holds: the next life outranks this
	// one and never raises for a round older than the promise.
	st, err = readClusterState(path)
	if err != nil || st.Disk.ProcessedSent < before.ProcessedSent || st.Disk.Epoch != before.Epoch {
		t.Fatalf("read back %+v, %v; want epoch %d, processed ≥ %d", st, err, before.Epoch, before.ProcessedSent)
	}
	next, err := New(cfg, Link{Log: &echoLog{t: t, path: path, now: &now}}, now, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := next.core.Persist(); d.ProcessedSent != st.Disk.ProcessedSent || d.Anchor != st.Disk.Anchor {
		t.Errorf("restarted with %+v; the file holds %+v", d, st.Disk)
	}
}

// newestSeq is the sequence number of the state file's newest slot.
func newestSeq(t *testing.T, path string) uint64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, seq, ok := newestSlot(data)
	if !ok {
		t.Fatalf("%s has no valid slot", path)
	}
	return seq
}

func stateWith(processed uint64, applied ...float64) clusterStateFile {
	return clusterStateFile{Disk: cluster.Disk{Epoch: 3, Boot: 7, Anchored: true, Anchor: time.Duration(processed) * time.Second, ProcessedSent: processed}, Applied: applied}
}

func readProcessed(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := readClusterState(path)
	if err != nil || st == nil {
		t.Fatalf("read %s: %+v, %v", path, st, err)
	}
	return st.Disk.ProcessedSent
}

// A process's first write lays the file out (replaced whole, atomically);
// the next ones overwrite the slot not holding the newest state in place,
// one fdatasync each, so that the other slot keeps the state before. A
// state that outgrows its slot, and a path that names another file (an
// operator restored or removed it), are written by replacing the file,
// never into a file no longer at the path.
func TestStateFileWrittenInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.state")
	w := stateWriter{path: path}
	if err := w.write(stateWith(1, 100)); err != nil {
		t.Fatal(err)
	}
	first, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	for p := uint64(2); p <= 5; p++ {
		before, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.write(stateWith(p, 100)); err != nil {
			t.Fatal(err)
		}
		after, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := readProcessed(t, path); got != p {
			t.Fatalf("wrote processed %d, read %d", p, got)
		}
		// The slot that held the newest state (p-1) is untouched.
		size := len(before) / 2
		older, _, _ := newestSlot(before)
		keep := 0
		if !bytes.Equal(before[:size], after[:size]) {
			keep = 1
		}
		if len(after) != len(before) || !bytes.Equal(before[keep*size:(keep+1)*size], after[keep*size:(keep+1)*size]) {
			t.Fatalf("write %d changed both slots", p)
		}
		if kept, _, ok := decodeSlot(after[keep*size : (keep+1)*size]); !ok || !bytes.Equal(kept, older) {
			t.Fatalf("write %d overwrote the slot holding the newest state", p)
		}
	}
	if info, err := os.Stat(path); err != nil || !os.SameFile(first, info) || w.inPlace != 4 || w.replaced != 1 {
		t.Fatalf("%d writes in place, %d files replaced, same file %v (%v); want 4 in place after 1 replaced", w.inPlace, w.replaced, err == nil && os.SameFile(first, info), err)
	}

	// Outgrowing the slot: replaced, and read back whole.
	big := make([]float64, 600)
	for i := range big {
		big[i] = 1e9 + float64(i)
	}
	if err := w.write(stateWith(6, big...)); err != nil {
		t.Fatal(err)
	}
	if st, err := readClusterState(path); err != nil || len(st.Applied) != 600 || st.Applied[599] != big[599] || w.replaced != 2 {
		t.Fatalf("a state larger than its slot: %d replaced, read %v", w.replaced, err)
	}

	// Another file moved over the path (here an earlier agent's, a single
	// JSON document): the next write replaces it. Written in place, as if
	// it were laid out as the writer's file, the new state would sit past
	// a document that readers take whole.
	other := filepath.Join(filepath.Dir(path), "restored")
	legacy := `{"version":1,"disk":{"Epoch":3,"Boot":7,"Anchor":0,"Anchored":false,"ProcessedSent":1},"applied":[100]}`
	if err := os.WriteFile(other, []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	if err := w.write(stateWith(7, 100)); err != nil {
		t.Fatal(err)
	}
	if got := readProcessed(t, path); got != 7 || w.replaced != 3 {
		t.Fatalf("after the path was replaced: read processed %d, %d replaced; want 7, 3", got, w.replaced)
	}
	// Removed: written again.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := w.write(stateWith(8, 100)); err != nil {
		t.Fatal(err)
	}
	if got := readProcessed(t, path); got != 8 {
		t.Fatalf("after the file was removed: read processed %d, want 8", got)
	}
}

// A crash part-way through a write in place leaves that slot failing its
// checksum: a restart reads the state before it, which every report sent
// so far depends on at most. Whichever part of the slot the crash wrote.
func TestStateFileTornWriteReadsThePreviousState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.state")
	w := stateWriter{path: path}
	for p := uint64(1); p <= 2; p++ {
		if err := w.write(stateWith(p, 100)); err != nil {
			t.Fatal(err)
		}
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	size := len(good) / 2
	next := (1 - w.newest) * size // the slot the next write goes to
	newer := stateWith(3, 250)
	newer.Version = 1
	payload, err := json.Marshal(newer)
	if err != nil {
		t.Fatal(err)
	}
	slot := appendSlot(nil, w.seq+1, payload)
	for name, torn := range map[string]func(f []byte){
		"header written, payload not": func(f []byte) { copy(f[next:], slot[:stateHeaderLen+len(payload)/2]) },
		"payload written, header not": func(f []byte) { copy(f[next+stateHeaderLen:], slot[stateHeaderLen:]) },
		"a bit flipped":               func(f []byte) { copy(f[next:], slot); f[next+stateHeaderLen+5] ^= 1 },
	} {
		f := bytes.Clone(good)
		torn(f)
		if err := os.WriteFile(path, f, 0o600); err != nil {
			t.Fatal(err)
		}
		if got := readProcessed(t, path); got != 2 {
			t.Errorf("%s: read processed %d, want the previous state's 2", name, got)
		}
	}
	// Whole, the new slot wins.
	f := bytes.Clone(good)
	copy(f[next:], slot)
	if err := os.WriteFile(path, f, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := readProcessed(t, path); got != 3 {
		t.Errorf("the whole newer slot: read processed %d, want 3", got)
	}
	// Neither slot valid: not a state, an error naming the file.
	if err := os.WriteFile(path, make([]byte, len(good)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readClusterState(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a file of zeros read as %v; want an error naming it", err)
	}
}

// BenchmarkStateFileWrite is one round's write of the state file: in place
// (one slot, one fdatasync), and replaced whole (a new file, its fsync,
// the rename and the directory's fsync: every round's write before #47).
func BenchmarkStateFileWrite(b *testing.B) {
	for _, mode := range []string{"in-place", "replaced"} {
		b.Run(mode, func(b *testing.B) {
			w := stateWriter{path: filepath.Join(b.TempDir(), "cluster.state")}
			p := uint64(1)
			for b.Loop() {
				if mode == "replaced" {
					w.close()
				}
				if err := w.write(stateWith(p, 5e6)); err != nil {
					b.Fatal(err)
				}
				p++
			}
			if mode == "in-place" && w.replaced != 1 || mode == "replaced" && w.inPlace != 0 {
				b.Fatalf("%d replaced, %d in place: not the write it names", w.replaced, w.inPlace)
			}
		})
	}
}
