package learner

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/agent/entity"
	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

// hostileSamples are the bad inputs a client can send the learner: lengths
// that lie, negative and overlong strings, a login cut in the middle,
// garbage after a valid header, a client-id that claims more bytes than
// the request holds.
func hostileSamples() [][]byte {
	produce := kt.Frame(kt.Produce(9, kt.TP{Topic: "orders", Partitions: []int32{3}}), 1, kt.Str("app"))
	login := kt.Frame(authenticate("\x00alice\x00secret"), 2, kt.Str("app"))
	long := kt.Frame(kt.Produce(9, kt.TP{Topic: "orders", Partitions: []int32{3}}), 3, kt.Str(strings.Repeat("c", 1000)))
	with := func(b []byte, off int, v ...byte) []byte {
		out := append([]byte{}, b...)
		copy(out[off:], v)
		return out
	}
	negSize := with(produce, 0, 0xff, 0xff, 0xff, 0xf0)
	negClient := with(produce, 12, 0xff, 0xfe)          // client-id length -2
	overClient := with(produce, 12, 0x7f, 0xff)         // 32767 bytes claimed
	bigSize := with(produce, 0, 0x7f, 0xff, 0xff, 0xff) // 2 GiB claimed
	garbage := append(append([]byte{}, produce[:16]...), 0xde, 0xad, 0xbe, 0xef, 0xff, 0xff, 0xff, 0xff, 0x80)
	cutLogin := login[:len(login)-9] // "\x00alice\x00" cut before its end
	splitLogin := login[:20]
	lying := with(long[:256], 12, 0x00, 0x80) // says 128, holds a 1000-byte id
	binary.BigEndian.PutUint32(lying[0:4], 252)
	return [][]byte{produce, login, long[:256], negSize, negClient, overClient, bigSize, garbage, cutLogin, splitLogin, lying, {}, {0, 0, 0}}
}

// FuzzLearn: no sample, however it lies, crashes the learner, names an
// entity that is not a client's, a user's, a topic-partition's or the
// unresolved one, or leaves more state than the connections it was given.
func FuzzLearn(f *testing.F) {
	for i, s := range hostileSamples() {
		f.Add(uint8(i%8), uint8(i), s)
	}
	policy := mustPolicy(f, cutConfig)
	hs := kt.Frame(handshake("PLAIN"), 0, kt.Str("app"))
	f.Fuzz(func(t *testing.T, flags, conn uint8, data []byte) {
		l := New[int](policy, nil)
		l.SetSASLListeners(func(c int) bool { return c%2 == 1 })
		c := int(conn % 4)
		if _, _, err := l.LearnSample(c, 1, Sample{Data: hs, Whole: true}); err != nil {
			t.Fatal(err)
		}
		// flags&4: the data path's hash of a cut client-id came (any value).
		d, _, _ := l.LearnSample(c, 1, Sample{Data: data, Whole: flags&1 != 0, ClientIDCut: flags&2 != 0,
			ClientIDHashed: flags&4 != 0, ClientIDHash: entity.LongClientHash(data)})
		for _, dir := range entity.Directions {
			target, decided := d.Target(dir)
			if !decided {
				continue
			}
			switch target.Key.Kind {
			case entity.KindClient, entity.KindClientPattern, entity.KindTopicPartition, entity.KindUser, entity.KindUserClient, entity.KindUnresolved:
			default:
				t.Fatalf("%s decided %v", dir, target.Key)
			}
			if len(target.Key.Name) > entity.MaxNameBytes {
				t.Fatalf("%s: a %d-byte entity name", dir, len(target.Key.Name))
			}
		}
		if l.Connections() != 1 {
			t.Fatalf("%d connections of state from one", l.Connections())
		}
	})
}
