package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// NewRealClusterWorld is the cluster world's three broker hosts running
// Apache Kafka (libs: KafkaLibs): one combined KRaft node on each, the
// three a static controller quorum, replicating between the hosts through
// the client host's routing, so each host's NIC carries its replication
// with its clients. Internal topics keep three replicas; props are more
// server.properties lines for every node.
func NewRealClusterWorld(dir, sluice, loadgen, libs string, props ...string) (*ClusterWorld, error) {
	w, err := newClusterHosts(dir, sluice, loadgen)
	if err != nil {
		return nil, err
	}
	var voters []string
	for _, b := range w.Brokers {
		voters = append(voters, fmt.Sprintf("%d@%s:9093", b.ID, b.IP))
	}
	common := append([]string{"offsets.topic.replication.factor=3", "transaction.state.log.replication.factor=3",
		"transaction.state.log.min.isr=2", "share.coordinator.state.topic.replication.factor=3",
		"share.coordinator.state.topic.min.isr=2", "default.replication.factor=3", "min.insync.replicas=2"}, props...)
	// A node is ready only once the quorum has a leader: start all three
	// at once.
	var starting sync.WaitGroup
	errs := make([]error, len(w.Brokers))
	for i, b := range w.Brokers {
		starting.Go(func() {
			b.Kafka, errs[i] = StartBroker(BrokerSpec{Libs: libs, NS: b.NS, IP: b.IP.String(), NodeID: int(b.ID),
				Dir: filepath.Join(dir, fmt.Sprintf("kafka-%d", b.ID)), Heap: "512m", Voters: strings.Join(voters, ","), Props: common})
		})
	}
	starting.Wait()
	if err := errors.Join(errs...); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// StartJava runs a Kafka Java tool in the client host, as World's does.
func (w *ClusterWorld) StartJava(name, main string, args ...string) (*Client, error) {
	b := w.Brokers[0].Kafka
	if b == nil {
		return nil, fmt.Errorf("%s: the cluster runs no real brokers (NewRealClusterWorld)", name)
	}
	conf := filepath.Join(w.Dir, "tools-log4j2.properties")
	if err := os.WriteFile(conf, []byte(ToolLog4j2), 0o644); err != nil {
		return nil, err
	}
	return startCommand(w.Clients.Name, w.Dir, name, func(cmd *exec.Cmd) {
		w.mu.Lock()
		w.procs = append(w.procs, cmd)
		w.mu.Unlock()
	}, true, JavaArgv(b.Spec.Libs, conf, w.Dir, "256m", main, args...))
}

// Bootstrap lists every broker's listener.
func (w *ClusterWorld) Bootstrap() string {
	var addrs []string
	for _, b := range w.Brokers {
		addrs = append(addrs, b.Addr())
	}
	return strings.Join(addrs, ",")
}
