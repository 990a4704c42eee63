package harness

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// advertiseSaslHandshakeV0 makes kfake advertise SaslHandshake versions
// 0-1, as every Kafka broker does (SaslHandshakeRequest.json: "0-1"),
// instead of kfake's 1-1. librdkafka (kcat) treats a broker without v0 as
// one that has no handshake at all and refuses to log in with PLAIN or
// SCRAM; with v0 advertised it still sends v1 and SaslAuthenticate, which
// kfake serves. The rest of kfake's answer is its own: it is read once
// from the broker, and every later ApiVersions gets that answer with the
// one range widened.
func advertiseSaslHandshakeV0(c *kfake.Cluster, dial func(addr string) (net.Conn, error), addr string) error {
	own, err := askApiVersions(dial, addr)
	if err != nil {
		return fmt.Errorf("kfake's ApiVersions: %w", err)
	}
	maxVersion := int16(-1)
	for i := range own.ApiKeys {
		switch own.ApiKeys[i].ApiKey {
		case int16(kmsg.SASLHandshake):
			own.ApiKeys[i].MinVersion = 0
		case int16(kmsg.ApiVersions):
			maxVersion = own.ApiKeys[i].MaxVersion
		}
	}
	c.ControlKey(int16(kmsg.ApiVersions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req.GetVersion() > maxVersion {
			return nil, nil, false // kfake answers what it does not serve
		}
		resp := *own
		resp.Version = req.GetVersion()
		return &resp, nil, true
	})
	return nil
}

// askApiVersions sends one ApiVersions v3 request (allowed before a SASL
// login) and reads the answer.
func askApiVersions(dial func(addr string) (net.Conn, error), addr string) (*kmsg.ApiVersionsResponse, error) {
	conn, err := dial(addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	req.ClientSoftwareName, req.ClientSoftwareVersion = "sluice-harness", "1"
	const correlationID = 1
	// Request header v2 (ApiVersions v3 is flexible, but its header's
	// client-id stays a nullable string): key, version, correlation id,
	// client id, no tagged fields.
	body := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	body = binary.BigEndian.AppendUint16(body, uint16(req.Version))
	body = binary.BigEndian.AppendUint32(body, correlationID)
	body = binary.BigEndian.AppendUint16(body, 0xffff) // null client-id
	body = append(body, 0)
	body = req.AppendTo(body)
	if _, err := conn.Write(binary.BigEndian.AppendUint32(nil, uint32(len(body)))); err != nil {
		return nil, err
	}
	if _, err := conn.Write(body); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < 4 || n > 1<<20 {
		return nil, fmt.Errorf("answer of %d bytes", n)
	}
	answer := make([]byte, n)
	if _, err := io.ReadFull(conn, answer); err != nil {
		return nil, err
	}
	if id := binary.BigEndian.Uint32(answer); id != correlationID {
		return nil, fmt.Errorf("answer to correlation id %d", id)
	}
	// ApiVersions answers with response header v0 at every version.
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = req.Version
	if err := resp.ReadFrom(answer[4:]); err != nil {
		return nil, err
	}
	if resp.ErrorCode != 0 {
		return nil, fmt.Errorf("error code %d", resp.ErrorCode)
	}
	return resp, nil
}
