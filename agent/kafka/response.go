package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A response starts with its size (int32, the bytes after it) and the
// correlation id of the request it answers (int32) in every version; a
// flexible response header's tagged fields come after, so the first 8
// bytes are all a latency measurement needs, whatever the API and version.
// Responses on a connection come back in the order of its requests, so a
// response start is matched to the oldest request still waiting there,
// and the correlation id confirms it.

// ResponseStart is the fixed start of a response.
type ResponseStart struct {
	Size          int32 // bytes after the size field
	CorrelationID int32
}

// MaxResponseBytes bounds a response's size: larger is not Kafka (a
// broker answers at most fetch.max.bytes, 50 MiB by default, plus
// headers; 1 GiB leaves room for any configuration).
const MaxResponseBytes = 1 << 30

// ErrMalformedResponse: the bytes cannot start a Kafka response.
var ErrMalformedResponse = errors.New("malformed kafka response start")

// ParseResponseStart reads a response's start from the first bytes of its
// first segment: short, negative or absurd sizes are refused.
func ParseResponseStart(b []byte) (ResponseStart, error) {
	if len(b) < 8 {
		return ResponseStart{}, fmt.Errorf("%w: %d bytes, need 8", ErrMalformedResponse, len(b))
	}
	size := int32(binary.BigEndian.Uint32(b))
	if size < 4 || size > MaxResponseBytes {
		return ResponseStart{}, fmt.Errorf("%w: size %d", ErrMalformedResponse, size)
	}
	return ResponseStart{Size: size, CorrelationID: int32(binary.BigEndian.Uint32(b[4:]))}, nil
}
