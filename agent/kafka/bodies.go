package kafka

import "fmt"

// Versions with topic IDs instead of names (Kafka 4.1, KIP-516).
const (
	produceTopicIDsFrom = 13
	fetchTopicIDsFrom   = 13
	// From Fetch v15 the replica id moves from the body to the
	// ReplicaState tagged field (KIP-903).
	fetchReplicaStateFrom = 15
	fetchReplicaStateTag  = 1
)

// produce walks a Produce body: transactional id (v3+), acks, timeout, then
// topics with their partitions, whose record batches are skipped.
func (p *Parser) produce(w *walker, r *Request) error {
	b := &w.b
	if r.Version >= 3 {
		w.str() // transactional id, nullable
	}
	b.Int16() // acks
	b.Int32() // timeout
	topics, ok := w.count()
	if w.stop() {
		r.TopicsHidden = true
		return w.ended("the produce header")
	}
	if !ok {
		return fmt.Errorf("%w: produce v%d topic count is null or negative", ErrMalformed, r.Version)
	}
	for t := 0; t < topics; t++ {
		tp, err := p.topic(w, r.Version >= produceTopicIDsFrom, &r.Topics)
		if err != nil || tp == nil {
			r.TopicsHidden = err == nil
			return err
		}
		// A sample that ends from here on hides the topics after this one
		// and, until its partition list is read whole, some of this one's.
		hide := func(partitions bool) {
			tp.Hidden = partitions
			r.TopicsHidden = t+1 < topics
		}
		parts, ok := w.count()
		if w.stop() {
			hide(true)
			return w.ended("a produce topic")
		}
		if !ok {
			return fmt.Errorf("%w: produce topic %d partition count is null or negative", ErrMalformed, t)
		}
		for i := 0; i < parts; i++ {
			part := b.Int32()
			if w.stop() {
				hide(true)
				return w.ended("a produce partition")
			}
			tp.Partitions = append(tp.Partitions, part)
			w.skipNullableBytes() // records
			w.skipTags()
			if w.stop() {
				hide(i+1 < parts)
				return w.ended("a produce partition's records")
			}
		}
		w.skipTags()
		if w.stop() {
			hide(false)
			return w.ended("a produce topic's tagged fields")
		}
	}
	w.skipTags()
	if w.stop() {
		return w.ended("the produce tagged fields")
	}
	return nil
}

// topic reads a topic name or ID and appends an entry for it to list. It
// returns nil (and no error) when the sample ended.
func (p *Parser) topic(w *walker, byID bool, list *[]TopicPartitions) (*TopicPartitions, error) {
	var entry TopicPartitions
	if byID {
		entry.ID = w.b.Uuid()
	} else {
		name, ok := w.str()
		if !ok && !w.stop() {
			return nil, fmt.Errorf("%w: null topic name", ErrMalformed)
		}
		if w.stop() {
			return nil, w.ended("a topic name")
		}
		entry.Name = p.intern(name)
	}
	if w.stop() {
		return nil, w.ended("a topic id")
	}
	// Reuse the partition slice left in this position by an earlier sample.
	if n := len(*list); n < cap(*list) {
		entry.Partitions = (*list)[:n+1][n].Partitions[:0]
	}
	*list = append(*list, entry)
	return &(*list)[len(*list)-1], nil
}

// fetch walks a Fetch body: replica id (v0–14), limits, session (v7+),
// topics and partitions, forgotten topics (v7+), rack (v11+), and the
// tagged fields where the ReplicaState lives from v15.
func (p *Parser) fetch(w *walker, r *Request) error {
	b := &w.b
	v := r.Version
	if v < fetchReplicaStateFrom {
		r.ReplicaID = b.Int32()
	}
	b.Int32() // max wait
	b.Int32() // min bytes
	if v >= 3 {
		b.Int32() // max bytes
	}
	if v >= 4 {
		b.Int8() // isolation level
	}
	if v >= 7 {
		r.SessionID = b.Int32()
		r.SessionEpoch = b.Int32()
	} else {
		r.SessionEpoch = -1 // no session: every request is a full fetch
	}
	topics, ok := w.count()
	if w.stop() {
		r.TopicsHidden = true
		return w.ended("the fetch header")
	}
	if !ok {
		return fmt.Errorf("%w: fetch v%d topic count is null or negative", ErrMalformed, v)
	}
	for t := 0; t < topics; t++ {
		tp, err := p.topic(w, v >= fetchTopicIDsFrom, &r.Topics)
		if err != nil || tp == nil {
			r.TopicsHidden = err == nil
			return err
		}
		hide := func(partitions bool) {
			tp.Hidden = partitions
			r.TopicsHidden = t+1 < topics
		}
		parts, ok := w.count()
		if w.stop() {
			hide(true)
			return w.ended("a fetch topic")
		}
		if !ok {
			return fmt.Errorf("%w: fetch topic %d partition count is null or negative", ErrMalformed, t)
		}
		for i := 0; i < parts; i++ {
			part := b.Int32()
			if w.stop() {
				hide(true)
				return w.ended("a fetch partition")
			}
			tp.Partitions = append(tp.Partitions, part)
			if v >= 9 {
				b.Int32() // current leader epoch
			}
			b.Int64() // fetch offset
			if v >= 12 {
				b.Int32() // last fetched epoch
			}
			if v >= 5 {
				b.Int64() // log start offset
			}
			b.Int32() // partition max bytes
			w.skipTags()
			if w.stop() {
				// The partition's index was read: it counts.
				hide(i+1 < parts)
				return w.ended("a fetch partition")
			}
		}
		w.skipTags()
		if w.stop() {
			hide(false)
			return w.ended("a fetch topic's tagged fields")
		}
	}
	if v >= 7 {
		if err := p.forgottenTopics(w, r, v >= fetchTopicIDsFrom, "fetch"); err != nil || w.stop() {
			return err
		}
	}
	if v >= 11 {
		w.str() // rack
	}
	if !w.flexible {
		if w.stop() {
			return w.ended("the rack")
		}
		return nil
	}
	return p.fetchTags(w, r)
}

// fetchTags reads the request's tagged fields, keeping the ReplicaState.
func (p *Parser) fetchTags(w *walker, r *Request) error {
	b := &w.b
	for n := b.Uvarint(); n > 0 && b.Ok(); n-- {
		tag, size := b.Uvarint(), b.Uvarint()
		field := b.Span(int(size))
		if w.stop() {
			return w.ended("the fetch tagged fields")
		}
		if tag == fetchReplicaStateTag && r.Version >= fetchReplicaStateFrom && len(field) >= 4 {
			r.ReplicaID = int32(uint32(field[0])<<24 | uint32(field[1])<<16 | uint32(field[2])<<8 | uint32(field[3]))
		}
	}
	if w.stop() {
		return w.ended("the fetch tagged fields")
	}
	return nil
}

// shareFetch walks a ShareFetch body (KIP-932, flexible from v0): group and
// member ids, the share session epoch, limits (max records and batch size
// from v1, acquire mode and renew flag from v2), then topics by ID with
// their partitions, skipping each partition's acknowledgement batches, and
// the forgotten topics.
func (p *Parser) shareFetch(w *walker, r *Request) error {
	b := &w.b
	v := r.Version
	w.str()                    // group id
	w.str()                    // member id
	r.SessionEpoch = b.Int32() // share session epoch
	b.Int32()                  // max wait
	b.Int32()                  // min bytes
	b.Int32()                  // max bytes
	if v >= 1 {
		b.Int32() // max records
		b.Int32() // batch size
	}
	if v >= 2 {
		b.Int8() // share acquire mode
		b.Int8() // is renew ack
	}
	topics, ok := w.count()
	if w.stop() {
		return w.ended("the share fetch header")
	}
	if !ok {
		return fmt.Errorf("%w: share fetch v%d topic count is null or negative", ErrMalformed, v)
	}
	for t := 0; t < topics; t++ {
		tp, err := p.topic(w, true, &r.Topics)
		if err != nil || tp == nil {
			return err
		}
		parts, ok := w.count()
		if w.stop() {
			return w.ended("a share fetch topic")
		}
		if !ok {
			return fmt.Errorf("%w: share fetch topic %d partition count is null or negative", ErrMalformed, t)
		}
		for i := 0; i < parts; i++ {
			part := b.Int32()
			if w.stop() {
				return w.ended("a share fetch partition")
			}
			tp.Partitions = append(tp.Partitions, part)
			if v == 0 {
				b.Int32() // partition max bytes
			}
			if err := w.skipAcknowledgements(); err != nil {
				return err
			}
			w.skipTags()
			if w.stop() {
				return w.ended("a share fetch partition")
			}
		}
		w.skipTags()
		if w.stop() {
			return w.ended("a share fetch topic's tagged fields")
		}
	}
	if err := p.forgottenTopics(w, r, true, "share fetch"); err != nil || w.stop() {
		return err
	}
	w.skipTags()
	if w.stop() {
		return w.ended("the share fetch tagged fields")
	}
	return nil
}

// skipAcknowledgements skips a share fetch partition's acknowledgement
// batches: first and last offset, and a list of acknowledge types.
func (w *walker) skipAcknowledgements() error {
	b := &w.b
	batches, ok := w.count()
	if w.stop() {
		return w.ended("acknowledgement batches")
	}
	if !ok {
		return fmt.Errorf("%w: acknowledgement batch count is null or negative", ErrMalformed)
	}
	for i := 0; i < batches; i++ {
		b.Int64() // first offset
		b.Int64() // last offset
		types, ok := w.count()
		if w.stop() {
			return w.ended("an acknowledgement batch")
		}
		if !ok {
			return fmt.Errorf("%w: acknowledge type count is null or negative", ErrMalformed)
		}
		b.Span(types)
		w.skipTags()
		if w.stop() {
			return w.ended("an acknowledgement batch")
		}
	}
	return nil
}

// forgottenTopics reads the topics a fetch session forgets (Fetch v7+,
// ShareFetch) into r.Forgotten: each by name or ID, with its partitions.
func (p *Parser) forgottenTopics(w *walker, r *Request, byID bool, api string) error {
	b := &w.b
	forgotten, ok := w.count()
	if w.stop() {
		return w.ended("the forgotten topics")
	}
	if !ok {
		return fmt.Errorf("%w: %s v%d forgotten topic count is null or negative", ErrMalformed, api, r.Version)
	}
	for t := 0; t < forgotten; t++ {
		tp, err := p.topic(w, byID, &r.Forgotten)
		if err != nil || tp == nil {
			return err
		}
		parts, ok := w.count()
		if w.stop() {
			return w.ended("a forgotten topic")
		}
		if !ok {
			return fmt.Errorf("%w: forgotten topic %d partition count is null or negative", ErrMalformed, t)
		}
		for i := 0; i < parts; i++ {
			part := b.Int32()
			if w.stop() {
				return w.ended("a forgotten partition")
			}
			tp.Partitions = append(tp.Partitions, part)
		}
		w.skipTags()
		if w.stop() {
			return w.ended("a forgotten topic's tagged fields")
		}
	}
	return nil
}
