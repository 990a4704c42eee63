package harness

import (
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// StartCommand runs any client program (kcat, a Java tool) in the client
// namespace as a Client: the socket meter judges it by its pid like a
// loadgen, Stop ends it, and ExitedEarly says whether it gave up. Nothing
// is read from its output (it is drained and discarded), so Rate, Moved
// and Errors stay zero: only the kernel's figures describe it. Its stderr
// goes to client-<name>.log in the world's directory.
func (w *World) StartCommand(name string, argv ...string) (*Client, error) {
	return startCommand(w.Pair.Client.Name, w.Dir, name, w.track, false, argv)
}

// StartCommandOut is StartCommand for a program whose standard output is
// its report (a Java perf tool's throughput and latency lines): it is kept
// in client-<name>.out (Output reads it).
func (w *World) StartCommandOut(name string, argv ...string) (*Client, error) {
	return startCommand(w.Pair.Client.Name, w.Dir, name, w.track, true, argv)
}

// Output is what a StartCommandOut program printed so far.
func (c *Client) Output() string {
	if c.outPath == "" {
		return ""
	}
	data, _ := os.ReadFile(c.outPath)
	return string(data)
}

// StartCommand runs a client program in the client host, as World's does.
func (w *ClusterWorld) StartCommand(name string, argv ...string) (*Client, error) {
	return startCommand(w.Clients.Name, w.Dir, name, func(cmd *exec.Cmd) {
		w.mu.Lock()
		w.procs = append(w.procs, cmd)
		w.mu.Unlock()
	}, false, argv)
}

func startCommand(ns, dir, name string, track func(*exec.Cmd), keep bool, argv []string) (*Client, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "client-"+name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	track(cmd)
	c := &Client{Name: name, cmd: cmd, done: make(chan struct{})}
	var sink io.WriteCloser = nopCloser{io.Discard}
	if keep {
		c.outPath = filepath.Join(dir, "client-"+name+".out")
		if sink, err = os.Create(c.outPath); err != nil {
			cmd.Process.Kill()
			return nil, err
		}
	}
	go func() {
		defer close(c.done)
		defer logf.Close()
		defer sink.Close()
		io.Copy(sink, out)
		c.mu.Lock()
		c.early = !c.stopping
		c.mu.Unlock()
	}()
	return c, nil
}

// LineFeed writes records, one 8 KiB line each (random bytes, hex), into a
// FIFO a line-reading producer takes its input from (kcat -P -l). A
// FIFO's writes block while the producer does not read: a producer held
// back holds its feed back with it.
type LineFeed struct {
	Path string
	f    *os.File
	done chan struct{}
	once sync.Once
}

// NewLineFeed makes the FIFO at path and feeds it: as fast as it is read
// for rate 0, else at most rate bytes/s, with no credit saved up beyond a
// tenth of a second (a producer held back gets no burst from its feed; it
// may still send what it queued meanwhile).
func NewLineFeed(path string, rate float64) (*LineFeed, error) {
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return nil, err
	}
	// O_RDWR never blocks on a FIFO; writes block (in Go's poller) while
	// nothing reads, and Close ends them.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	raw := make([]byte, 4096)
	for i := range raw {
		raw[i] = byte(rand.Uint32())
	}
	line := append([]byte(hex.EncodeToString(raw)), '\n')
	l := &LineFeed{Path: path, f: f, done: make(chan struct{})}
	go l.feed(line, rate)
	return l, nil
}

func (l *LineFeed) feed(line []byte, rate float64) {
	defer close(l.done)
	batch := make([]byte, 0, 64*len(line))
	for range 64 {
		batch = append(batch, line...)
	}
	if rate <= 0 {
		for {
			if _, err := l.f.Write(batch); err != nil {
				return
			}
		}
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	credit, last := 0.0, time.Now()
	for now := range tick.C {
		credit = min(credit+rate*now.Sub(last).Seconds(), rate/10+float64(len(line)))
		last = now
		for credit >= float64(len(line)) {
			if _, err := l.f.Write(line); err != nil {
				return
			}
			credit -= float64(len(line))
		}
		if n := time.Now(); n.Sub(last) > 10*time.Millisecond {
			last = n // a blocked write saves up no credit
		}
	}
}

// Close ends the feed: the producer reads the end of its input, flushes and
// exits.
func (l *LineFeed) Close() {
	l.once.Do(func() {
		l.f.Close()
		<-l.done
	})
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
