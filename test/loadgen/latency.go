package main

import (
	"encoding/json"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// produceLatencies records, as the client measured them, how long each
// Produce request waited for its response: franz-go's ReadWait and
// TimeToRead, from the request's last byte written to the response read
// whole (the broker's time, the wire both ways, and reading a small
// response). The latency scenario compares it with
// what sluice measured at the broker's NIC for the same client.
type produceLatencies struct {
	mu   sync.Mutex
	wait []time.Duration
}

// maxLatencies bounds what one client keeps (a long run keeps its first).
const maxLatencies = 1 << 20

var _ kgo.HookBrokerE2E = (*produceLatencies)(nil)

func (p *produceLatencies) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key != 0 || e2e.Err() != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.wait) < maxLatencies {
		p.wait = append(p.wait, e2e.ReadWait+e2e.TimeToRead)
	}
}

// write saves the latencies, in microseconds, as a JSON list.
func (p *produceLatencies) write(path string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	us := make([]float64, len(p.wait))
	for i, d := range p.wait {
		us[i] = float64(d) / float64(time.Microsecond)
	}
	data, err := json.Marshal(us)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
