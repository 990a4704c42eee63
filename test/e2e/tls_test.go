package e2e

import (
	"net/netip"
	"testing"

	"github.com/sluice-dev/sluice/test/harness"
)

// ⑫ An SSL listener is attributed by peer: kfake serves TLS, and clients
// connect from three addresses of the client namespace. Two peers in
// different entities.peers prefixes are each held to their own limit (the
// first peer's two consumers together), and a peer no prefix holds is held
// to the listener's entity. Every request is encrypted, so nothing here is
// learned from a client-id: the consumers all claim the same one, which
// would put them in one entity on a plaintext listener. Judged from the
// broker sockets' tcp_info.
func TestScenarioTLSPeers(t *testing.T) {
	const (
		peerALimit    = 6e6 // 198.18.0.0/26: two consumers together
		peerBLimit    = 9e6 // 198.18.0.128/26
		listenerLimit = 4e6 // every other peer of the listener
	)
	w := world(t, harness.Options{Topics: []string{"orders"}, TLS: true})
	peerB, other := netip.MustParseAddr("198.18.0.130"), netip.MustParseAddr("198.18.0.200")
	for _, addr := range []netip.Addr{peerB, other} {
		if err := w.AddClientAddress(addr); err != nil {
			t.Fatal(err)
		}
	}
	a := start(t, w, harness.Config{FetchCapacity: "40MB", Listeners: "[{port: 9092, protocol: SSL}]",
		Extra: "tls: {enabled: true, ca_file: " + w.CAFile + "}\n" +
			"entities:\n  peers:\n" +
			"    198.18.0.0/26: {consumer_byte_rate: " + itoa(peerALimit) + "}\n" +
			"    198.18.0.128/26: {consumer_byte_rate: " + itoa(peerBLimit) + "}\n" +
			"  listeners:\n    '9092': {consumer_byte_rate: " + itoa(listenerLimit) + "}\n"})
	defer a.Stop()
	from := func(addr netip.Addr) []string {
		return []string{"-tls-ca", w.CAFile, "-source-addr", addr.String()}
	}
	consumer := func(name string, addr netip.Addr, more ...string) *harness.Client {
		return client(t, w, harness.ClientSpec{Name: name, Lib: "franz", Mode: "consume", ClientID: "same-app", Topic: "orders", Args: append(from(addr), more...)})
	}
	a1, a2 := consumer("peer-a-1", w.Pair.ClientIP), consumer("peer-a-2", w.Pair.ClientIP)
	b := consumer("peer-b", peerB, twoReaders...)
	o := consumer("unmatched", other, twoReaders...)
	kernel, own := metered(t, w, 1, []*harness.Client{a1, a2, b, o}, []harness.Ref{
		{Kind: "peer", Name: "198.18.0.0/26"}, {Kind: "peer", Name: "198.18.0.128/26"}, {Kind: "listener", Name: "9092"}})
	peerA := kernel[0] + kernel[1]
	errs, ok := noErrors(a1, a2, b, o)
	record(t, Result{
		Name: "tls-peers",
		Pass: within(peerA, peerALimit, 0.05) && within(kernel[2], peerBLimit, 0.05) && within(kernel[3], listenerLimit, 0.05) && ok,
		Measured: map[string]any{"peer_a_together_bps": peerA, "peer_a_each_bps": kernel[:2], "peer_b_bps": kernel[2], "unmatched_bps": kernel[3],
			"client_errors": errs, "measured_at": meteredAt, "sluice_vs_kernel": differences([]float64{peerA, kernel[2], kernel[3]}, own)},
		Expected: map[string]any{"peer_a_together_bps": peerALimit, "peer_b_bps": peerBLimit, "unmatched_bps": listenerLimit, "tolerance": 0.05, "client_errors": 0},
	})
}
