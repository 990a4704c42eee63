package harness

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// StartCommand runs any client program (kcat, a Java tool) in the client
// namespace as a Client: the socket meter judges it by its pid like a
// loadgen, Stop ends it, and ExitedEarly says whether it gave up. Nothing
// is read from its output (it is drained and discarded), so Rate, Moved
// and Errors stay zero: only the kernel's figures describe it. Its stderr
// goes to client-<name>.log in the world's directory.
func (w *World) StartCommand(name string, argv ...string) (*Client, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", w.Pair.Client.Name}, argv...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(w.Dir, "client-"+name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	w.track(cmd)
	c := &Client{Name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		defer logf.Close()
		io.Copy(io.Discard, out)
		c.mu.Lock()
		c.early = !c.stopping
		c.mu.Unlock()
	}()
	return c, nil
}
