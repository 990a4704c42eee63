package kafka

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A real response's start, as franz-go encodes it for produce and fetch at
// their oldest and newest versions, reads back its size and correlation
// id; bytes that cannot start a response are refused with
// ErrMalformedResponse.
func TestParseResponseStart(t *testing.T) {
	for _, resp := range []kmsg.Response{kmsg.NewPtrProduceResponse(), kmsg.NewPtrFetchResponse()} {
		for _, v := range []int16{0, resp.MaxVersion()} {
			resp.SetVersion(v)
			b := responseFrame(4242, resp.IsFlexible(), resp.AppendTo(nil))
			r, err := ParseResponseStart(b)
			if err != nil || r.CorrelationID != 4242 || int(r.Size) != len(b)-4 {
				t.Errorf("%T v%d: %+v %v (frame of %d bytes)", resp, v, r, err, len(b))
			}
		}
	}
	for _, bad := range [][]byte{nil, {0, 0, 0, 8, 0, 0, 0}, {0, 0, 0, 3, 0, 0, 0, 1}, {0x80, 0, 0, 0, 0, 0, 0, 1}, {0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 1}} {
		if _, err := ParseResponseStart(bad); !errors.Is(err, ErrMalformedResponse) {
			t.Errorf("%x: %v, want ErrMalformedResponse", bad, err)
		}
	}
}
