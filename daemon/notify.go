package daemon

import (
	"fmt"
	"net"
	"os"
)

// NotifyReady tells systemd (Type=notify) the agent is ready, when run
// under it ($NOTIFY_SOCKET), and writes readyFile when given.
func NotifyReady(readyFile string) error {
	if readyFile != "" {
		if err := os.WriteFile(readyFile, []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o644); err != nil {
			return fmt.Errorf("ready file: %w", err)
		}
	}
	return sdNotify("READY=1")
}

// NotifyWatchdog tells systemd's watchdog that a cycle succeeded (a no-op
// outside systemd).
func NotifyWatchdog() { sdNotify("WATCHDOG=1") }

// NotifyStopping tells systemd the agent is stopping.
func NotifyStopping() error { return sdNotify("STOPPING=1") }

func sdNotify(state string) error {
	socket := os.Getenv("NOTIFY_SOCKET")
	if socket == "" {
		return nil
	}
	addr := &net.UnixAddr{Name: socket, Net: "unixgram"}
	if socket[0] == '@' {
		addr.Name = "\x00" + socket[1:]
	}
	c, err := net.DialUnix("unixgram", nil, addr)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}
