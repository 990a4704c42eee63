package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// dialOpts is franz's dialer for -tls-ca (connect with TLS, trusting that
// CA) and -source-addr (connect from that local address, as a client on
// another host of the peer's network would); none when neither is set.
func dialOpts(o opts) ([]kgo.Opt, error) {
	if o.tlsCA == "" && o.sourceAddr == "" {
		return nil, nil
	}
	netDialer := &net.Dialer{Timeout: 10 * time.Second}
	if o.sourceAddr != "" {
		ip := net.ParseIP(o.sourceAddr)
		if ip == nil {
			return nil, fmt.Errorf("-source-addr %q is not an IP address", o.sourceAddr)
		}
		netDialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	var tlsConfig *tls.Config
	if o.tlsCA != "" {
		pem, err := os.ReadFile(o.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-ca %s: no certificate", o.tlsCA)
		}
		tlsConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return []kgo.Opt{kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
		if tlsConfig == nil {
			return netDialer.DialContext(ctx, network, host)
		}
		cfg := tlsConfig.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(host) // an IP: checked against the certificate's IP SANs
		return (&tls.Dialer{NetDialer: netDialer, Config: cfg}).DialContext(ctx, network, host)
	})}, nil
}
