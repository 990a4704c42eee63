package clusterbudget

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"

	"github.com/sluice-dev/sluice/cluster"
)

// clusterStateFile is the state file's content: the core's Disk, and the
// shares the data path was given (a restart on the same boot with adopted
// pins starts from them).
type clusterStateFile struct {
	Version int          `json:"version"`
	Disk    cluster.Disk `json:"disk"`
	Applied []float64    `json:"applied"`
}

// readClusterState reads the state file; a missing file is no state (nil),
// an unreadable one is an error naming it, not a silent fresh start.
func readClusterState(path string) (*clusterStateFile, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster.state_file: %w", err)
	}
	var st clusterStateFile
	if err := json.Unmarshal(data, &st); err != nil || st.Version != 1 {
		return nil, fmt.Errorf("cluster.state_file %s: not a sluice cluster state (remove it to start without one: the agent then learns its epoch from the topic)", path)
	}
	return &st, nil
}

// writeClusterState replaces the state file atomically and durably: a
// promise sent must survive a crash (fsync before rename, then the
// directory).
func writeClusterState(path string, st clusterStateFile) error {
	st.Version = 1
	for i, v := range st.Applied {
		if math.IsInf(v, 1) {
			st.Applied[i] = math.MaxFloat64 // JSON has no infinity; no share reaches it
		}
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".cluster-state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// bootID identifies this boot of the host: monotonic clock readings are
// comparable only within one.
func bootID() uint64 {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return randomUint64() // no boot id: never trust an old anchor
	}
	h := fnv.New64a()
	h.Write(data)
	return h.Sum64()
}

func randomUint64() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux ≥ 3.17
	}
	return binary.LittleEndian.Uint64(b[:])
}
