package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// The metrics endpoint under an exporter-toolkit web configuration: TLS
// and basic auth. A scrape over TLS with the right user and password gets
// the metrics (sluice_build_info among them); one without the password,
// with a wrong one, or over plain HTTP does not; a web configuration that
// names a missing certificate is refused before anything listens.
func TestMetricsEndpointTLSAndBasicAuth(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, pool := selfSigned(t)
	os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o600)
	os.WriteFile(filepath.Join(dir, "key.pem"), keyPEM, 0o600)
	hash, err := bcrypt.GenerateFromPassword([]byte("scrape-Pw-81c4"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(dir, "web.yaml")
	os.WriteFile(webConfig, []byte("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\nbasic_auth_users:\n  prometheus: "+string(hash)+"\n"), 0o600)

	r := newRig(t, "")
	m := NewMetrics(r.a, r.dp, MetricsInfo{Build: BuildInfo{Version: "v9.8.7", Revision: "feed"}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := m.serveOn(l, webConfig)
	defer stop()
	addr := l.Addr().String()

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}}}
	get := func(url, user, pass string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, body := get("https://"+addr+"/metrics", "prometheus", "scrape-Pw-81c4")
	if code != 200 || !strings.Contains(body, `sluice_build_info{`) || !strings.Contains(body, `version="v9.8.7"`) {
		t.Errorf("scrape over TLS with basic auth: %d\n%.400s", code, body)
	}
	for _, c := range []struct{ name, user, pass string }{{"no credentials", "", ""}, {"a wrong password", "prometheus", "guess"}} {
		if code, _ := get("https://"+addr+"/metrics", c.user, c.pass); code != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", c.name, code)
		}
	}
	if code, body := get("http://"+addr+"/metrics", "prometheus", "scrape-Pw-81c4"); code == 200 {
		t.Errorf("plain HTTP was served metrics: %.200s", body)
	}
	if code, body := get("https://"+addr+"/", "prometheus", "scrape-Pw-81c4"); code != 200 || !strings.Contains(body, "/metrics") || strings.Contains(body, "debug/pprof") {
		t.Errorf("landing page: %d %.200s", code, body)
	}

	broken := filepath.Join(dir, "broken.yaml")
	os.WriteFile(broken, []byte("tls_server_config:\n  cert_file: missing.pem\n  key_file: key.pem\n"), 0o600)
	if _, err := m.Open("127.0.0.1:0", broken); err == nil || !strings.Contains(err.Error(), "metrics.web_config_file") {
		t.Errorf("a web configuration naming a missing certificate: %v, want a refusal naming metrics.web_config_file", err)
	}
}

// selfSigned is a certificate for 127.0.0.1, its key, and a pool trusting it.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice metrics test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), pool
}
