package kafka

import (
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Requests recorded from real clients talking to kfake (go run
// ./test/recordclients): each file is a client's requests, size-prefixed and
// concatenated. Every one must parse as kmsg parses it, and the Produce and
// Fetch versions must be the ones the design expects each client to send.
func TestParseRecordedClients(t *testing.T) {
	want := map[string]struct {
		clientID       string
		produce, fetch int16
		byID           bool
	}{
		"franz-go": {"franz-orders", 13, 18, true},
		"sarama":   {"sarama-orders", 9, 12, false},
		"kafka-go": {"kafkago-orders", 8, 10, false},
	}
	for client, w := range want {
		data, err := os.ReadFile(filepath.Join("testdata", "clients", client+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		p := NewParser()
		versions := map[string]bool{}
		var topicIDs = map[[16]byte]bool{}
		for off := 0; off < len(data); {
			size := int(binary.BigEndian.Uint32(data[off:]))
			sample := data[off : off+4+size]
			off += 4 + size
			var r Request
			if err := p.Parse(sample, &r); err != nil {
				t.Fatalf("%s: %v", client, err)
			}
			if r.Truncated {
				t.Fatalf("%s: a complete recorded request reported truncated", client)
			}
			if r.APIKey == KeyProduce || r.APIKey == KeyFetch {
				checkAgainstOracle(t, client, sample)
				for _, tp := range r.Topics {
					if w.byID {
						if tp.Name != "" || tp.ID == ([16]byte{}) {
							t.Errorf("%s: v%d topic %+v should be named by ID", client, r.Version, tp)
						}
						topicIDs[tp.ID] = true
					} else if tp.Name != "orders" {
						t.Errorf("%s: topic %q, want orders", client, tp.Name)
					}
				}
				if r.IsFollowerFetch() {
					t.Errorf("%s: consumer fetch taken for a follower", client)
				}
			}
			if r.ClientID != w.clientID && !strings.HasPrefix(r.ClientID, w.clientID) {
				// franz-go's group requests and sarama's may use the same id;
				// anything else is a recording from the wrong client.
				t.Errorf("%s: client-id %q, want %q", client, r.ClientID, w.clientID)
			}
			versions[fmt.Sprintf("%d:v%d", r.APIKey, r.Version)] = true
		}
		for _, kv := range []string{fmt.Sprintf("0:v%d", w.produce), fmt.Sprintf("1:v%d", w.fetch)} {
			if !versions[kv] {
				t.Errorf("%s: no request %s among %v", client, kv, slices.Sorted(maps.Keys(versions)))
			}
		}
		if w.byID && len(topicIDs) != 1 {
			t.Errorf("%s: produce and fetch name %d topic IDs, want the one of orders", client, len(topicIDs))
		}
		t.Logf("%s sent %v", client, slices.Sorted(maps.Keys(versions)))
	}
}
