package learner

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/kafka"
	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

// A hostile client that grows its fetch session past sessionCap through
// incremental requests leaves the learner no more state than the cap
// allows, and is held to the strictest configured topic-partition of any
// topic (orders-3 for Fetch), not freed to its client entity, until a full
// request opens a new session.
func TestSessionCap(t *testing.T) {
	l := New[int](mustPolicy(t, partitionsConfig), nil)
	const c, perRequest, total = 1, 1000, 200_000
	fetch := func(epoch int32, tps, forgotten []kt.TP) Target {
		return learn(t, l, c, kt.Fetch(12, 9, epoch, tps, forgotten), "app").Fetch
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	if got := fetch(0, nil, nil); got != client("app") {
		t.Fatalf("empty session: %+v", got)
	}
	base := heap()
	var atCap uint64
	// Request k lists 1000 new partitions of topic t<k%100>: 100 topic
	// names in all, so that what the parser interns stays the same.
	for k := range total / perRequest {
		parts := make([]int32, perRequest)
		for i := range parts {
			parts[i] = int32(k/100*perRequest + i)
		}
		got := fetch(int32(k+1), []kt.TP{{Topic: fmt.Sprint("t", k%100), Partitions: parts}}, nil)
		s := &l.conns[c].session
		if s.size() > sessionCap {
			t.Fatalf("after %d partitions the session holds %d, over the cap of %d", (k+1)*perRequest, s.size(), sessionCap)
		}
		switch added := (k + 1) * perRequest; {
		case added <= sessionCap && got != client("app"):
			t.Fatalf("%d ungoverned partitions, under the cap: %+v, want the client", added, got)
		case added > sessionCap && got != topicPart("orders-3"):
			t.Fatalf("%d partitions, over the cap: %+v, want the strictest configured partition", added, got)
		}
		if (k+1)*perRequest == sessionCap {
			atCap = heap()
		}
	}
	end := heap()
	grownAtCap, grown := int64(atCap)-int64(base), int64(end)-int64(base)
	t.Logf("heap grown by %d bytes at the cap, %d after %d partitions", grownAtCap, grown, total)
	if grown > max(grownAtCap, 0)+64<<10 {
		t.Errorf("after %d partitions the learner holds %d bytes more, more than at the cap (%d)", total, grown, grownAtCap)
	}
	if !l.conns[c].session.overflow {
		t.Error("the session is not marked overflowed")
	}
	// Nothing an incremental request says frees it: not forgetting, not
	// listing only ungoverned partitions.
	if got := fetch(1000, []kt.TP{{Topic: "t0", Partitions: []int32{0}}}, []kt.TP{{Topic: "t1", Partitions: []int32{0, 1, 2}}}); got != topicPart("orders-3") {
		t.Errorf("an overflowed session's incremental request: %+v", got)
	}
	// A full request resets it.
	if got := fetch(0, []kt.TP{{Topic: "t0", Partitions: []int32{0}}}, nil); got != client("app") {
		t.Errorf("a new session after the overflow: %+v, want the client", got)
	}
	if s := &l.conns[c].session; s.overflow || s.size() != 1 {
		t.Errorf("after a full request: overflow %v, %d partitions", s.overflow, s.size())
	}
	if got := fetch(-1, []kt.TP{{Topic: "orders", Partitions: []int32{3}}}, nil); got != topicPart("orders-3") {
		t.Errorf("sessionless request: %+v", got)
	}
}

// TestSessionSampleCostIsFlat: one incremental Fetch sample costs the
// session's bookkeeping as much with 10 partitions in the set as with the
// cap or 100,000 (overflowed), whether its topics are named by name or by
// IDs no name resolves (retried every sample). The measure is the entries
// the session visits (session.work), not time; BenchmarkLearnHostileSession
// times the same samples.
func TestSessionSampleCostIsFlat(t *testing.T) {
	for _, byID := range []bool{false, true} {
		work := map[int]uint64{}
		for _, n := range hostileSessionSizes {
			l := New[int](mustPolicy(t, precedenceConfig), names{})
			var sample []byte
			if byID {
				sample = openSessionByID(t, l, 1, n)
			} else {
				sample = openHostileSession(t, l, 1, n)
			}
			if _, _, err := l.Learn(1, 1, sample); err != nil {
				t.Fatal(err)
			}
			before := l.conns[1].session.work
			if _, _, err := l.Learn(1, 1, sample); err != nil {
				t.Fatal(err)
			}
			work[n] = l.conns[1].session.work - before
		}
		t.Logf("by ID %v: work per sample %v", byID, work)
		for _, n := range hostileSessionSizes[1:] {
			if work[n] > 2*work[10] {
				t.Errorf("by ID %v: a sample on a session of %d partitions visits %d entries, more than twice the %d of one of 10",
					byID, n, work[n], work[10])
			}
		}
	}
}

// openSessionByID is openHostileSession with topics named by IDs the
// learner's TopicNames does not know: every one of them is retried.
func openSessionByID(tb testing.TB, l *Learner[int], c, n int) []byte {
	tb.Helper()
	id := func(i int) [16]byte { return [16]byte{7, byte(i >> 16), byte(i >> 8), byte(i)} }
	learn := func(epoch int32, tps []kt.TP) {
		tb.Helper()
		if _, _, err := l.Learn(c, 1, kt.Frame(kt.Fetch(13, 77, epoch, tps, nil), 1, kt.Str("hostile"))); err != nil {
			tb.Fatal(err)
		}
	}
	learn(0, nil)
	epoch, topic := int32(1), 0
	for added := 0; added < n; epoch++ {
		var tps []kt.TP
		for ; len(tps) < 100 && added < n; topic++ {
			parts := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}[:min(10, n-added)]
			tps = append(tps, kt.TP{ID: id(topic), Partitions: parts})
			added += len(parts)
		}
		learn(epoch, tps)
	}
	return kt.Frame(kt.Fetch(13, 77, epoch, []kt.TP{{ID: id(0), Partitions: []int32{0}}}, nil), 1, kt.Str("hostile"))
}

const sessionConfig = `
entities:
  clients:
    app: {consumer_byte_rate: 50MiB}
  topic-partitions:
    orders-3: {consumer_byte_rate: 3MiB}
    orders-5: {consumer_byte_rate: 5MiB}
    audit-0:  {consumer_byte_rate: 4MiB}
    audit-1:  {consumer_byte_rate: 4MiB}
    events-2: {producer_byte_rate: 1MiB}
`

// Forgetting partitions in any order, by name or by topic ID, leaves the
// set the broker holds and the decision the whole set makes: the strictest
// configured partition left, the strictest of any topic while a topic ID
// is unknown, the client when none is left.
func TestSessionRemove(t *testing.T) {
	known := names{}
	l := New[int](mustPolicy(t, sessionConfig), known)
	step := func(version int16, epoch int32, tps, forgotten []kt.TP) Target {
		t.Helper()
		return learn(t, l, 1, kt.Fetch(version, 9, epoch, tps, forgotten), "app").Fetch
	}
	tp := func(topic string, parts ...int32) []kt.TP { return []kt.TP{{Topic: topic, Partitions: parts}} }
	if got := step(12, 0, []kt.TP{{Topic: "orders", Partitions: []int32{0, 3, 5, 7}}, {Topic: "audit", Partitions: []int32{1, 0}}}, nil); got != topicPart("orders-3") {
		t.Fatalf("full: %+v", got)
	}
	// Forget the strictest from the middle of its topic: the next one.
	if got := step(12, 1, nil, tp("orders", 3)); got != topicPart("audit-0") {
		t.Errorf("orders-3 forgotten: %+v", got)
	}
	// Forgetting what the set does not hold changes nothing.
	if got := step(12, 2, nil, append(tp("orders", 3, 4), tp("nothing", 0)...)); got != topicPart("audit-0") {
		t.Errorf("absent partitions forgotten: %+v", got)
	}
	if got := step(12, 3, nil, tp("audit", 0)); got != topicPart("audit-1") {
		t.Errorf("audit-0 forgotten: %+v", got)
	}
	// The partition moved into the forgotten one's place is still found.
	if got := step(12, 4, nil, tp("orders", 7)); got != topicPart("audit-1") {
		t.Errorf("orders-7 forgotten: %+v", got)
	}
	if got := step(12, 5, nil, tp("orders", 5)); got != topicPart("audit-1") {
		t.Errorf("orders-5 forgotten: %+v", got)
	}
	if got := step(12, 6, nil, tp("audit", 1)); got != client("app") {
		t.Errorf("every configured partition forgotten: %+v", got)
	}
	// Re-adding one counts it again.
	if got := step(12, 7, tp("orders", 5), nil); got != topicPart("orders-5") {
		t.Errorf("orders-5 added again: %+v", got)
	}
	// A topic ID nobody knows holds the connection to the strictest of
	// any topic until it is forgotten...
	if got := step(13, 8, []kt.TP{{ID: unknownID, Partitions: []int32{0, 1}}}, nil); got != topicPart("orders-3") {
		t.Errorf("an unknown topic ID: %+v", got)
	}
	if got := step(13, 9, nil, []kt.TP{{ID: unknownID, Partitions: []int32{1, 0}}}); got != topicPart("orders-5") {
		t.Errorf("the unknown topic ID forgotten: %+v", got)
	}
	// ...or until its name is known (TopicNames learned it since).
	auditID := [16]byte{3, 3}
	if got := step(13, 10, []kt.TP{{ID: auditID, Partitions: []int32{0, 3}}}, nil); got != topicPart("orders-3") {
		t.Errorf("audit by an unknown ID: %+v", got)
	}
	known[auditID] = "audit"
	if got := step(13, 11, nil, nil); got != topicPart("audit-0") {
		t.Errorf("the ID is now known as audit's: %+v", got)
	}
	if got := step(13, 12, nil, []kt.TP{{ID: auditID, Partitions: []int32{0}}}); got != topicPart("orders-5") {
		t.Errorf("audit-0 forgotten by ID: %+v", got)
	}
	s := &l.conns[1].session
	checkSession(t, l)
	if s.size() != 3 || len(s.topics) != 2 || len(s.pending) != 0 {
		t.Errorf("%d partitions in %d topics, %d pending; want orders-0, orders-5 and audit-3", s.size(), len(s.topics), len(s.pending))
	}
}

// A reload re-resolves the whole set under the new policy, though no
// request names a partition again.
func TestSessionReloadRecounts(t *testing.T) {
	l := New[int](mustPolicy(t, partitionsConfig), nil)
	fetch := func(epoch int32, tps []kt.TP) Target {
		return learn(t, l, 1, kt.Fetch(12, 9, epoch, tps, nil), "app").Fetch
	}
	if got := fetch(0, []kt.TP{{Topic: "audit", Partitions: []int32{0, 1}}, {Topic: "orders", Partitions: []int32{3}}}); got != topicPart("orders-3") {
		t.Fatalf("full: %+v", got)
	}
	l.SetPolicy(mustPolicy(t, sessionConfig))
	if got := fetch(1, nil); got != topicPart("orders-3") {
		t.Errorf("after a reload: %+v", got)
	}
	l.SetPolicy(mustPolicy(t, "entities: {topic-partitions: {audit-1: {consumer_byte_rate: 1MiB}, other-0: {consumer_byte_rate: 2MiB}}}"))
	if got := fetch(2, nil); got != topicPart("audit-1") {
		t.Errorf("after a reload that configures audit-1: %+v", got)
	}
	l.SetPolicy(mustPolicy(t, "entities: {topic-partitions: {other-0: {consumer_byte_rate: 2MiB}}}"))
	if got := fetch(3, nil); got != client("app") {
		t.Errorf("after a reload that configures none of the set: %+v", got)
	}
}

// TestSessionMatchesTheWholeSet drives random sessions (full, incremental
// and sessionless requests, by name and by ID, topic IDs learned on the
// way, reloads) and checks every decision against the rule applied to the
// whole set, as decide did before sessions kept counts.
func TestSessionMatchesTheWholeSet(t *testing.T) {
	policies := []*entity.Policy{mustPolicy(t, sessionConfig), mustPolicy(t, partitionsConfig), mustPolicy(t, precedenceConfig)}
	ids := map[string][16]byte{"orders": ordersID, "audit": {3, 3}, "events": {4, 4}, "__consumer_offsets": {5, 5}, "broadcast-topic": broadcastID, "": unknownID}
	topics := []string{"orders", "audit", "events", "__consumer_offsets", "broadcast-topic", ""}
	type entry struct {
		name string
		id   [16]byte
		p    int32
	}
	rng := rand.New(rand.NewPCG(46, 5))
	for run := range 20 {
		known := names{}
		policy := policies[0]
		l := New[int](policy, known)
		set := map[entry]bool{}
		// randomTPs names up to n topics, by ID (v13) or by name (v12:
		// not the topic only an ID names).
		randomTPs := func(n int, byID bool) []kt.TP {
			var tps []kt.TP
			for range rng.IntN(n + 1) {
				name := topics[rng.IntN(len(topics))]
				tp := kt.TP{Topic: name}
				if byID {
					tp = kt.TP{ID: ids[name]}
				} else if name == "" {
					continue
				}
				for range 1 + rng.IntN(3) {
					tp.Partitions = append(tp.Partitions, int32(rng.IntN(7)))
				}
				tps = append(tps, tp)
			}
			return tps
		}
		for i := range 300 {
			switch rng.IntN(50) {
			case 0:
				policy = policies[rng.IntN(len(policies))]
				l.SetPolicy(policy)
			case 1, 2:
				name := topics[rng.IntN(len(topics)-1)]
				known[ids[name]] = name
			}
			epoch := int32(1 + i)
			switch r := rng.IntN(20); {
			case i == 0 || r == 0:
				epoch = 0 // the first request opens the session: the learner saw it open
			case r == 1:
				epoch = -1
			}
			version, byID := int16(12), rng.IntN(2) == 0
			if byID {
				version = 13
			}
			tps, forgotten := randomTPs(3, byID), []kt.TP(nil)
			if epoch > 0 {
				forgotten = randomTPs(3, byID)
			}
			if epoch <= 0 {
				clear(set)
			}
			for _, tp := range tps {
				for _, p := range tp.Partitions {
					set[entry{tp.Topic, tp.ID, p}] = true
				}
			}
			for _, tp := range forgotten {
				for _, p := range tp.Partitions {
					delete(set, entry{tp.Topic, tp.ID, p})
				}
			}
			got := learn(t, l, 1, kt.Fetch(version, 9, epoch, tps, forgotten), "app").Fetch
			// The rule over the whole set.
			var strictest entity.Key
			unknown := false
			for e := range set {
				name, ok := topicName(known, e.name, e.id)
				if !ok {
					unknown = true
					continue
				}
				if kafka.IsInternalTopic(name) {
					continue
				}
				if k, ok := policy.TopicPartition(name, e.p); ok && (strictest == (entity.Key{}) || policy.Stricter(entity.Fetch, k, strictest)) {
					strictest = k
				}
			}
			want := client("app")
			if anyTP, _ := policy.StrictestTopicPartition(entity.Fetch, ""); unknown {
				want = Target{Key: anyTP}
			} else if strictest != (entity.Key{}) {
				want = Target{Key: strictest}
			}
			if got != want {
				t.Fatalf("run %d, request %d (v%d, epoch %d, %v, forgetting %v): %+v, want %+v", run, i, version, epoch, tps, forgotten, got, want)
			}
			if epoch == -1 {
				clear(set) // sessionless: its partitions were the request's only
			}
			if s := &l.conns[1].session; s.size() != len(set) {
				t.Fatalf("run %d, request %d: the session holds %d partitions, the broker %d", run, i, s.size(), len(set))
			}
			checkSession(t, l)
		}
	}
}

// checkSession checks the indexes of connection 1's session against its
// set: each partition's index in its topic, the pending topics, the
// counts.
func checkSession(t *testing.T, l *Learner[int]) {
	t.Helper()
	s, env := &l.conns[1].session, l.sessionEnv()
	n := 0
	counts := map[int32]int32{}
	for ref, top := range s.topics {
		if top.ref != ref || len(top.parts) == 0 {
			t.Fatalf("topic %v: %+v", ref, top)
		}
		for i, p := range top.parts {
			if j, ok := s.parts[sessionPartition{ref, p}]; !ok || int(j) != i {
				t.Fatalf("%v partition %d at %d, indexed at %d (%v)", ref, p, i, j, ok)
			}
		}
		n += len(top.parts)
		if top.resolved != (top.pending < 0) || top.pending >= 0 && s.pending[top.pending] != top {
			t.Fatalf("topic %v: resolved %v, pending at %d", ref, top.resolved, top.pending)
		}
		if !top.resolved || kafka.IsInternalTopic(top.name) {
			continue
		}
		for _, p := range top.parts {
			if k, ok := env.policy.TopicPartition(top.name, p); ok {
				r, _ := env.policy.TopicPartitionRank(entity.Fetch, k)
				counts[r]++
			}
		}
	}
	if n != s.size() {
		t.Fatalf("topics hold %d partitions, the set %d", n, s.size())
	}
	for i, top := range s.pending {
		if top.pending != i || s.topics[top.ref] != top {
			t.Fatalf("pending %d: %+v", i, top)
		}
	}
	if !s.indexed || s.gen != env.gen {
		return // the next Fetch recounts
	}
	if len(counts) != len(s.counts) {
		t.Fatalf("counts %v, want %v", s.counts, counts)
	}
	best := int32(-1)
	for r, c := range counts {
		if s.counts[r] != c {
			t.Fatalf("counts %v, want %v", s.counts, counts)
		}
		if best < 0 || r < best {
			best = r
		}
	}
	if !s.stale && s.best != best {
		t.Fatalf("best rank %d, want %d", s.best, best)
	}
}
