package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"
)

// Prometheus is a real Prometheus server (Debian's) in the broker
// namespace, scraping the agent's /metrics every second and evaluating
// sluice's shipped rules, so a scenario can ask it which alerts fire.
type Prometheus struct {
	client *http.Client
}

// prometheusAddr is where the server listens inside the broker namespace.
const prometheusAddr = "127.0.0.1:9090"

// StartPrometheus starts Prometheus on rulesFile (deploy/prometheus'),
// with every `for:` shortened to forDuration so that a scenario of a few
// seconds can see an alert go pending, fire and resolve; the expressions
// are the shipped ones. It returns once the server is ready.
func (w *World) StartPrometheus(rulesFile string, forDuration time.Duration) (*Prometheus, error) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		return nil, err
	}
	rules = regexp.MustCompile(`(?m)^(\s+for:) \S+$`).ReplaceAll(rules, []byte("$1 "+forDuration.String()))
	dir := filepath.Join(w.Dir, "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [rules.yaml]
scrape_configs:
  - job_name: sluice
    static_configs: [{targets: [%q]}]
`, metricsAddr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(w.Dir, "prometheus.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command("ip", "netns", "exec", w.Pair.Broker.Name, "prometheus",
		"--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+prometheusAddr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start prometheus (make deps installs it): %w", err)
	}
	w.track(cmd) // Close stops and waits for it
	p := &Prometheus{client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) { return w.Pair.Broker.Dial(prometheusAddr) },
	}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := p.client.Get("http://" + prometheusAddr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("prometheus not ready after 30 s (see %s): %v", logf.Name(), err)
		}
		time.Sleep(200 * time.Millisecond) // polling /-/ready, the readiness signal itself

	}
}

// Alert is one alert as Prometheus' /api/v1/alerts reports it.
type Alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"` // pending or firing
}

// Alerts lists the alerts pending or firing now.
func (p *Prometheus) Alerts() ([]Alert, error) {
	resp, err := p.client.Get("http://" + prometheusAddr + "/api/v1/alerts")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Alerts []Alert `json:"alerts"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("alerts API: status %q", body.Status)
	}
	return body.Data.Alerts, nil
}

// WaitAlert polls until the named alert's state for the given direction
// is want ("firing", or "" for neither pending nor firing) and returns
// how long that took.
func (p *Prometheus) WaitAlert(name, direction, want string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		alerts, err := p.Alerts()
		if err == nil {
			state := ""
			for _, a := range alerts {
				if a.Labels["alertname"] == name && a.Labels["direction"] == direction {
					state = a.State
				}
			}
			if state == want {
				return time.Since(start), nil
			}
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("alert %s %s not %q after %v (last error %v)", name, direction, want, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// ScrapeMetrics reads the agent's /metrics from inside the broker
// namespace, as Prometheus would.
func (w *World) ScrapeMetrics() ([]byte, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, _, addr string) (net.Conn, error) { return w.Pair.Broker.Dial(addr) },
	}}
	resp, err := client.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return io.ReadAll(resp.Body)
}
