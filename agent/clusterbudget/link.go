package clusterbudget

import (
	"time"

	"github.com/sluice-dev/sluice/cluster"
)

// Log is the coordination topic (cluster/kafkalog.Log).
type Log interface {
	// Publish sends a report without blocking.
	Publish(r *cluster.Report)
	// Drain delivers, in log order, the reports received since the last
	// call, and the latest time on the monotonic clock as of which every
	// report in the log has been delivered (ok false: none known yet).
	Drain(fn func(r *cluster.Report)) (caughtUpAt time.Duration, ok bool)
	Stats() LogStats
	Close()
}

// LogStats are the transport's counters.
type LogStats struct {
	Published, PublishFailed, Delivered, Undecodable, TopicErrors uint64
	// LateAcks counts reports acknowledged after max_delivery: the
	// protocol's delivery bound was broken for them (kafkalog.Stats).
	LateAcks uint64
	// Lag is how many records in the log are not delivered yet.
	Lag       int64
	CaughtUp  bool
	LastError string
}

// LeaderSource counts the partitions of topics a broker leads, from the
// cluster's metadata (false: not known yet).
type LeaderSource interface {
	Led(broker int32, topics []string) (uint32, bool)
}

// Link is what Deps.NewCluster builds: the topic and the
// leadership metadata, and how to end both.
type Link struct {
	Log     Log
	Leaders LeaderSource // nil: leadership unknown (the reservation is spread evenly)
	Stop    func()
}
