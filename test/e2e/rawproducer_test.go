package e2e

import (
	"net"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// rawProducer is one client connection this process drives with
// hand-built Produce requests (for what kgo will not send: client-ids it
// refuses, chosen segmentation, several partitions per request): it keeps
// up to four in flight, counts the error codes Kafka answers, remembers why
// it stopped early, and stops once.
type rawProducer struct {
	conn     net.Conn
	port     uint16
	errs     atomic.Int64
	stopping atomic.Bool
	mu       sync.Mutex
	err      error // why it stopped early
	wg       sync.WaitGroup
	once     sync.Once
}

func newRawProducer(conn net.Conn) rawProducer {
	return rawProducer{conn: conn, port: uint16(conn.LocalAddr().(*net.TCPAddr).Port)}
}

// produce writes request(i), framed with correlation id firstCorr+i, for
// i = 0, 1, … with up to four unanswered, until the connection ends; each
// response (v7) frees a slot.
func (p *rawProducer) produce(format *kmsg.RequestFormatter, firstCorr int32, request func(i int) kmsg.Request) {
	inflight := make(chan struct{}, 4)
	p.wg.Add(2)
	go func() { // writer
		defer p.wg.Done()
		for i := 0; ; i++ {
			inflight <- struct{}{}
			if _, err := p.conn.Write(format.AppendRequest(nil, request(i), firstCorr+int32(i))); err != nil {
				p.fail(err)
				return
			}
		}
	}()
	go func() { // reader: one response per request, each frees a slot
		defer p.wg.Done()
		for {
			body, err := readFrame(p.conn)
			if err != nil {
				p.fail(err)
				select { // a writer waiting for a slot sees the closed connection
				case <-inflight:
				default:
				}
				return
			}
			resp := kmsg.NewPtrProduceResponse()
			resp.SetVersion(7)
			if err := resp.ReadFrom(body[4:]); err != nil {
				p.errs.Add(1)
			} else {
				for _, t := range resp.Topics {
					for _, pr := range t.Partitions {
						if pr.ErrorCode != 0 {
							p.errs.Add(1)
						}
					}
				}
			}
			<-inflight
		}
	}()
}

func (p *rawProducer) fail(err error) {
	if p.stopping.Load() {
		return
	}
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
	p.conn.Close()
}

// failure is why the producer stopped before stop, if it did.
func (p *rawProducer) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *rawProducer) stop() {
	p.once.Do(func() {
		p.stopping.Store(true)
		p.conn.Close()
		p.wg.Wait()
	})
}
