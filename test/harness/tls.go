package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// brokerTLS makes a self-signed certificate for the broker's address,
// writes it to dir/ca.pem for clients to trust, and returns the
// listener's configuration.
func brokerTLS(dir string, broker netip.Addr) (*tls.Config, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice test broker"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{broker.AsSlice()},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, "", err
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, "", err
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, caFile, nil
}

// AddClientAddress gives the client namespace another address on its
// veth (in the broker's subnet), for clients that connect from it
// (loadgen -source-addr): peers in different prefixes on one link.
func (w *World) AddClientAddress(addr netip.Addr) error {
	out, err := exec.Command("ip", "-n", w.Pair.Client.Name, "addr", "add", netip.PrefixFrom(addr, 24).String(), "dev", w.Pair.ClientDev).CombinedOutput()
	if err != nil {
		return fmt.Errorf("add client address %v: %v: %s", addr, err, out)
	}
	return nil
}
