// Command recordclients records the requests real Kafka clients send, for
// the learner's tests: it runs kfake on loopback with a listener that tees
// every client→broker byte, drives franz-go, sarama and kafka-go through a
// produce and a consume, and writes each client's requests (size-prefixed,
// concatenated) to agent/kafka/testdata/clients/<client>.bin.
//
// Run from the repository root: go run ./test/recordclients
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// tee records what clients write to the broker, per connection.
type tee struct {
	net.Listener
	mu    sync.Mutex
	conns []*recorded
}

type recorded struct {
	net.Conn
	mu  sync.Mutex
	buf []byte
}

func (r *recorded) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.mu.Lock()
	r.buf = append(r.buf, p[:n]...)
	r.mu.Unlock()
	return n, err
}

func (t *tee) Accept() (net.Conn, error) {
	c, err := t.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rc := &recorded{Conn: c}
	t.mu.Lock()
	t.conns = append(t.conns, rc)
	t.mu.Unlock()
	return rc, nil
}

// take returns and forgets every complete request recorded so far.
func (t *tee) take() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []byte
	for _, c := range t.conns {
		c.mu.Lock()
		for len(c.buf) >= 4 {
			size := int(uint32(c.buf[0])<<24 | uint32(c.buf[1])<<16 | uint32(c.buf[2])<<8 | uint32(c.buf[3]))
			if len(c.buf) < 4+size {
				break
			}
			out = append(out, c.buf[:4+size]...)
			c.buf = c.buf[4+size:]
		}
		c.mu.Unlock()
	}
	return out
}

func main() {
	dir := flag.String("out", "agent/kafka/testdata/clients", "output directory")
	flag.Parse()
	if err := run(*dir); err != nil {
		log.Fatal(err)
	}
}

func run(dir string) error {
	var listeners []*tee
	var mu sync.Mutex
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(3, "orders", "__internal-audit"),
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			l, err := net.Listen(network, "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			t := &tee{Listener: l}
			mu.Lock()
			listeners = append(listeners, t)
			mu.Unlock()
			return t, nil
		}),
	)
	if err != nil {
		return err
	}
	defer cluster.Close()
	addr := cluster.ListenAddrs()[0]
	take := func() []byte {
		mu.Lock()
		defer mu.Unlock()
		var out []byte
		for _, l := range listeners {
			out = append(out, l.take()...)
		}
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clients := []struct {
		name string
		run  func(context.Context, string) error
	}{
		{"franz-go", franz},
		{"sarama", saramaClient},
		{"kafka-go", kafkaGo},
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, c := range clients {
		take() // drop what earlier clients left
		if err := c.run(ctx, addr); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		time.Sleep(200 * time.Millisecond) // let the last requests land in the tee
		data := take()
		if len(data) == 0 {
			return fmt.Errorf("%s: nothing recorded", c.name)
		}
		file := filepath.Join(dir, c.name+".bin")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			return err
		}
		fmt.Printf("%s: %d bytes\n", file, len(data))
	}
	return nil
}

const records = 5

func franz(ctx context.Context, addr string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ClientID("franz-orders"),
		kgo.DefaultProduceTopic("orders"), kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("franz-group"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	for i := 0; i < records; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("franz-%d", i))}).FirstErr(); err != nil {
			return err
		}
	}
	got := 0
	for got < records {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return err
		}
		got += fs.NumRecords()
	}
	return nil
}

func saramaClient(ctx context.Context, addr string) error {
	cfg := sarama.NewConfig()
	cfg.ClientID = "sarama-orders"
	cfg.Version = sarama.V2_8_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	producer, err := sarama.NewSyncProducer([]string{addr}, cfg)
	if err != nil {
		return err
	}
	for i := 0; i < records; i++ {
		if _, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: "orders", Partition: 1, Value: sarama.StringEncoder(fmt.Sprintf("sarama-%d", i))}); err != nil {
			return err
		}
	}
	producer.Close()
	consumer, err := sarama.NewConsumer([]string{addr}, cfg)
	if err != nil {
		return err
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition("orders", 1, sarama.OffsetOldest)
	if err != nil {
		return err
	}
	defer pc.Close()
	for got := 0; got < records; got++ {
		select {
		case <-pc.Messages():
		case err := <-pc.Errors():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func kafkaGo(ctx context.Context, addr string) error {
	dialer := &kafka.Dialer{ClientID: "kafkago-orders", Timeout: 10 * time.Second}
	w := &kafka.Writer{Addr: kafka.TCP(addr), Topic: "orders", Balancer: &kafka.Hash{},
		Transport: &kafka.Transport{ClientID: "kafkago-orders"}, BatchTimeout: 10 * time.Millisecond,
		RequiredAcks: kafka.RequireAll}
	for i := 0; i < records; i++ {
		if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("k"), Value: []byte(fmt.Sprintf("kafkago-%d", i))}); err != nil {
			return err
		}
	}
	w.Close()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: "orders", Partition: 2, Dialer: dialer, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(kafka.FirstOffset); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// Key "k" hashes to one partition; reading partition 2 may find none of
	// them, and the fetch requests are what is recorded, so a timeout is fine.
	for {
		if _, err := r.ReadMessage(rctx); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return nil
			}
			return err
		}
	}
}
