package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

// rawDribble is the tiny-segment flood: one connection that writes
// pipelined ApiVersions requests one byte per write with Nagle off, so
// that nearly every byte travels in a segment of its own, at -rate bytes
// (segments) per second; a reader drains the responses. moved counts the
// bytes written; errs counts write or read failures.
func rawDribble(ctx context.Context, o opts, moved, errs *atomic.Int64) error {
	if o.rate <= 0 {
		return fmt.Errorf("dribble needs -rate (bytes, so segments, per second)")
	}
	r, err := dialRaw(ctx, o)
	if err != nil {
		return err
	}
	defer r.close()
	r.conn.(*net.TCPConn).SetNoDelay(true)
	go func() { // drain responses so the broker never blocks on us
		buf := make([]byte, 64<<10)
		for {
			if _, err := r.conn.Read(buf); err != nil {
				return
			}
		}
	}()
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	av.ClientSoftwareName, av.ClientSoftwareVersion = "sluice-loadgen-dribble", "1"
	start := time.Now()
	var written int64
	for ctx.Err() == nil {
		r.corr++
		for _, b := range r.format.AppendRequest(nil, av, r.corr) {
			if written%256 == 0 {
				pace(ctx, start, written, o.rate)
			}
			if _, err := r.conn.Write([]byte{b}); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				errs.Add(1)
				return err
			}
			written++
			moved.Store(written)
		}
	}
	return nil
}

// rawConn is one connection speaking the Kafka protocol with kmsg, for
// what no client library lets a test choose: the Fetch's replica id (a
// forged follower fetch) and the connection's local port (a reused
// 4-tuple). One request in flight. Close sends an RST (SO_LINGER 0), so
// the same 4-tuple can be used again at once.
type rawConn struct {
	conn   net.Conn
	format *kmsg.RequestFormatter
	corr   int32
}

func dialRaw(ctx context.Context, o opts) (*rawConn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	if o.localPort > 0 {
		d.LocalAddr = &net.TCPAddr{Port: o.localPort}
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
			})
			if err != nil {
				return err
			}
			return serr
		}
	}
	conn, err := d.DialContext(ctx, "tcp", o.bootstrap)
	if err != nil {
		return nil, err
	}
	go func() { <-ctx.Done(); conn.SetDeadline(time.Now()) }()
	r := &rawConn{conn: conn, format: kmsg.NewRequestFormatter(kmsg.FormatterClientID(o.clientID))}
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	av.ClientSoftwareName, av.ClientSoftwareVersion = "sluice-loadgen-raw", "1"
	if _, err := r.roundTrip(av); err != nil {
		r.close()
		return nil, fmt.Errorf("api versions: %w", err)
	}
	return r, nil
}

func (r *rawConn) close() {
	r.conn.(*net.TCPConn).SetLinger(0)
	r.conn.Close()
}

// roundTrip sends a request and reads its whole response.
func (r *rawConn) roundTrip(req kmsg.Request) ([]byte, error) {
	r.corr++
	if _, err := r.conn.Write(r.format.AppendRequest(nil, req, r.corr)); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(r.conn, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > 256<<20 {
		return nil, fmt.Errorf("response of %d bytes", n)
	}
	body := make([]byte, n)
	_, err := io.ReadFull(r.conn, body)
	return body, err
}

// rawLoop repeats a request until ctx ends, counting bytes(response).
func rawLoop(ctx context.Context, o opts, moved, errs *atomic.Int64, next func() kmsg.Request, bytes func(resp []byte) int) error {
	r, err := dialRaw(ctx, o)
	if err != nil {
		return err
	}
	defer r.close()
	for ctx.Err() == nil {
		resp, err := r.roundTrip(next())
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			errs.Add(1)
			return err
		}
		moved.Add(int64(bytes(resp)))
	}
	return nil
}

// rawFetch fetches one partition again and again (the fetch offset stays
// at 0: the broker's synthetic batches are what is read) and counts the
// response bytes; -replica-id makes it claim to be a follower.
func rawFetch(ctx context.Context, o opts, moved, errs *atomic.Int64) error {
	return rawLoop(ctx, o, moved, errs, func() kmsg.Request {
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(12)
		req.ReplicaID = int32(o.replicaID)
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 100, 1, 8<<20
		req.SessionEpoch = -1
		t := kmsg.NewFetchRequestTopic()
		t.Topic = o.topic
		p := kmsg.NewFetchRequestTopicPartition()
		p.Partition = int32(o.partition)
		p.PartitionMaxBytes = 1 << 20
		p.CurrentLeaderEpoch, p.LogStartOffset = -1, -1
		t.Partitions = append(t.Partitions, p)
		req.Topics = append(req.Topics, t)
		return req
	}, func(resp []byte) int { return 4 + len(resp) })
}

// rawProduce sends Produce v7 requests (topic by name, acks=1) of one
// record batch each and counts the records' value bytes.
func rawProduce(ctx context.Context, o opts, moved, errs *atomic.Int64) error {
	const records = 16
	template := value(o.valueBytes)
	values := make([][]byte, records)
	for i := range values {
		values[i] = template
	}
	batch := kafkatest.RecordBatch(values, time.Now().UnixMilli())
	return rawLoop(ctx, o, moved, errs, func() kmsg.Request {
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(7)
		req.Acks, req.TimeoutMillis = 1, 30000
		t := kmsg.NewProduceRequestTopic()
		t.Topic = o.topic
		p := kmsg.NewProduceRequestTopicPartition()
		p.Partition = int32(o.partition)
		p.Records = batch
		t.Partitions = append(t.Partitions, p)
		req.Topics = append(req.Topics, t)
		return req
	}, func([]byte) int { return records * o.valueBytes })
}

// rawChurn opens connections at -rate per second, each sending ApiVersions
// and a Metadata request before it closes (FIN): connection churn. moved
// counts connections completed. With -random-ids every connection names
// itself a new client-id (client-id churn).
func rawChurn(ctx context.Context, o opts, moved, errs *atomic.Int64) error {
	if o.rate <= 0 {
		return fmt.Errorf("churn needs -rate (connections per second)")
	}
	start := time.Now()
	for n := int64(0); ctx.Err() == nil; n++ {
		pace(ctx, start, n, o.rate)
		co := o
		if o.randomIDs {
			co.clientID = fmt.Sprintf("%s-%d-%08x", o.clientID, n, mrand.Uint32())
		}
		go func() {
			r, err := dialRaw(ctx, co)
			if err != nil {
				if ctx.Err() == nil {
					errs.Add(1)
				}
				return
			}
			defer r.conn.Close()
			md := kmsg.NewPtrMetadataRequest()
			md.SetVersion(9)
			if _, err := r.roundTrip(md); err != nil {
				if ctx.Err() == nil {
					errs.Add(1)
				}
				return
			}
			moved.Add(1)
		}()
	}
	return nil
}
