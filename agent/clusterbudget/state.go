package clusterbudget

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"syscall"

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

// The state file's layout. A round's promise must be on disk before the
// report that makes it is sent, and that is once a round. Replacing the
// file each time (a temporary file, fsync, rename, fsync of the directory)
// cost ~0.8 ms here, the largest part of the control cycle's 2 ms goal
// (#47). So the file holds two copies of the state, each in a slot of whole
// blocks with a sequence number and a checksum: a write overwrites the
// slot not holding the newest state in place and fdatasyncs it (~0.1 ms),
// and a reader takes the valid slot with the higher sequence number. A
// crash part-way through a write leaves that slot failing its checksum and
// the other, the state before it, intact; the report that depends on the
// new state has not been sent then, so what a restart reads is never older
// than what any report sent promised. The file is replaced whole, as
// before, on the first write of a process, when the state outgrows its
// slot, and when the path no longer names the file laid out.
//
// Slot: "SLUICECS", sequence number (uint64), payload length (uint32),
// CRC-32C of those two fields and the payload (uint32), all little
// endian, then the payload (clusterStateFile as JSON). A file that starts
// with '{' is the single JSON document earlier agents wrote.
const (
	stateMagic     = "SLUICECS"
	stateHeaderLen = 24
	stateBlock     = 4096
)

var stateCRC = crc32.MakeTable(crc32.Castagnoli)

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
	notOurs := fmt.Errorf("cluster.state_file %s: not a sluice cluster state (remove it to start without one: the agent then learns its epoch from the topic)", path)
	payload := data
	if !bytes.HasPrefix(data, []byte("{")) {
		var ok bool
		if payload, _, ok = newestSlot(data); !ok {
			return nil, notOurs
		}
	}
	var st clusterStateFile
	if err := json.Unmarshal(payload, &st); err != nil || st.Version != 1 {
		return nil, notOurs
	}
	return &st, nil
}

// newestSlot returns the payload and sequence number of the file's valid
// slot with the higher sequence number (ok false: neither is valid, or the
// file is not laid out in two slots of whole blocks).
func newestSlot(data []byte) (payload []byte, seq uint64, ok bool) {
	size := len(data) / 2
	if len(data)%2 != 0 || size < stateBlock || size%stateBlock != 0 {
		return nil, 0, false
	}
	for i := range 2 {
		if p, s, valid := decodeSlot(data[i*size : (i+1)*size]); valid && (!ok || s > seq) {
			payload, seq, ok = p, s, true
		}
	}
	return payload, seq, ok
}

func decodeSlot(slot []byte) (payload []byte, seq uint64, ok bool) {
	if string(slot[:len(stateMagic)]) != stateMagic {
		return nil, 0, false
	}
	seq = binary.LittleEndian.Uint64(slot[8:])
	n := binary.LittleEndian.Uint32(slot[16:])
	if uint64(n) > uint64(len(slot)-stateHeaderLen) {
		return nil, 0, false
	}
	payload = slot[stateHeaderLen : stateHeaderLen+int(n)]
	if crc32.Update(crc32.Checksum(slot[8:20], stateCRC), stateCRC, payload) != binary.LittleEndian.Uint32(slot[20:]) {
		return nil, 0, false
	}
	return payload, seq, true
}

func appendSlot(dst []byte, seq uint64, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, stateMagic...)
	dst = binary.LittleEndian.AppendUint64(dst, seq)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Update(crc32.Checksum(dst[start+8:start+20], stateCRC), stateCRC, payload))
	return append(dst, payload...)
}

// stateWriter keeps the state file: every write is durable when it
// returns nil (the report that depends on it may then be sent).
type stateWriter struct {
	path string
	// placed is the file this writer laid out at path, open as f (nil:
	// none yet, or its last write failed), in slots of slotSize bytes;
	// slot newest holds the newest state, numbered seq.
	placed   os.FileInfo
	f        *os.File
	slotSize int
	newest   int
	seq      uint64
	applied  []float64
	buf      []byte
	// replaced and inPlace count the writes of each kind.
	replaced, inPlace uint64
}

// write makes st durable at the writer's path: in place when the file is
// the one it laid out and st fits its slot, otherwise (or when writing in
// place fails) by replacing the file whole.
func (w *stateWriter) write(st clusterStateFile) error {
	st.Version = 1
	// JSON has no infinity; no share reaches the largest float. A copy: st
	// holds the core's own shares.
	w.applied = append(w.applied[:0], st.Applied...)
	for i, v := range w.applied {
		if math.IsInf(v, 1) {
			w.applied[i] = math.MaxFloat64
		}
	}
	st.Applied = w.applied
	payload, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if w.placed != nil && stateHeaderLen+len(payload) <= w.slotSize && w.overwrite(payload) == nil {
		w.inPlace++
		return nil
	}
	// Whatever a failed write in place left in its slot, the file is no
	// longer trusted to be laid out as this writer thinks: replaced whole.
	w.close()
	if err := w.replace(payload); err != nil {
		return err
	}
	w.replaced++
	return nil
}

// overwrite writes the payload over the older slot of the file at path,
// if that is still the file this writer laid out, and fdatasyncs it.
func (w *stateWriter) overwrite(payload []byte) error {
	info, err := os.Stat(w.path)
	if err != nil {
		return err
	}
	if !os.SameFile(info, w.placed) {
		return errors.New("the file was replaced by another")
	}
	slot := 1 - w.newest
	w.buf = appendSlot(w.buf[:0], w.seq+1, payload)
	if _, err := w.f.WriteAt(w.buf, int64(slot*w.slotSize)); err != nil {
		return err
	}
	if err := fdatasync(w.f); err != nil {
		return err
	}
	w.newest, w.seq = slot, w.seq+1
	return nil
}

// replace writes a new file with the payload in its first slot (the second
// empty) and renames it over path, durably: fsync before the rename, then
// the directory's.
func (w *stateWriter) replace(payload []byte) error {
	size := (stateHeaderLen + 2*len(payload) + stateBlock - 1) / stateBlock * stateBlock // room for the state to grow
	data := appendSlot(make([]byte, 0, 2*size), w.seq+1, payload)
	data = data[:2*size] // zeros: an invalid slot, and blocks allocated so that a write in place needs no new ones
	dir := filepath.Dir(w.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".cluster-state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	keep := false
	defer func() {
		if !keep {
			tmp.Close()
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	info, err := tmp.Stat()
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), w.path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return err
	}
	keep = true // open for the writes in place that follow
	w.placed, w.f, w.slotSize, w.newest, w.seq = info, tmp, size, 0, w.seq+1
	return nil
}

// close forgets the file laid out: the next write replaces it.
func (w *stateWriter) close() {
	if w.f != nil {
		w.f.Close()
	}
	w.placed, w.f = nil, nil
}

// fdatasync flushes the file's data and what is needed to read it back,
// not its times: a write in place changes neither its size nor its blocks.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var syncErr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if syncErr = syscall.Fdatasync(int(fd)); syncErr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if syncErr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: syncErr}
	}
	return nil
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
