package daemon

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// portHolder names the process listening on addr's TCP port in the
// caller's network namespace: its command name and pid, or "" when it
// cannot tell (the socket tables or other processes' descriptors are not
// readable, as under the unit's ProtectProc=invisible).
func portHolder(addr string) (comm string, pid int) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0
	}
	port, err := net.LookupPort("tcp", p)
	if err != nil {
		return "", 0
	}
	inodes := map[string]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		// thread-self: the table of this thread's namespace (a test's
		// thread may have entered another).
		listeningInodes(fmt.Sprintf("/proc/thread-self/net/%s", table), port, inodes)
	}
	if len(inodes) == 0 {
		return "", 0
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, proc := range procs {
		fds, _ := os.ReadDir(proc + "/fd")
		for _, fd := range fds {
			target, err := os.Readlink(proc + "/fd/" + fd.Name())
			if err != nil || !strings.HasPrefix(target, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] {
				name, _ := os.ReadFile(proc + "/comm")
				pid, _ := strconv.Atoi(filepath.Base(proc))
				return strings.TrimSpace(string(name)), pid
			}
		}
	}
	return "", 0
}

// listeningInodes adds the inodes of the sockets listening on port in one
// of /proc's TCP tables ("sl local rem st … uid timeout inode").
func listeningInodes(table string, port int, inodes map[string]bool) {
	f, err := os.Open(table)
	if err != nil {
		return
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 10 || fields[3] != "0A" { // TCP_LISTEN
			continue
		}
		_, hexPort, ok := strings.Cut(fields[1], ":")
		if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
			inodes[fields[9]] = true
		}
	}
}
