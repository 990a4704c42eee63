package e2e

import (
	"bufio"
	"bytes"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/test/harness"
)

// nicBuckets is one entity's cumulative NIC latency histogram as sluice
// exports it (sluice_request_duration_seconds), by upper bound in seconds.
type nicBuckets map[float64]float64

var (
	produceBucketLine = regexp.MustCompile(`^sluice_request_duration_seconds_bucket\{(.*)\} (\S+)$`)
	bucketBound       = regexp.MustCompile(`le="([^"]+)"`)
)

// scrapeNICBuckets reads the produce-latency histogram of one client id
// from sluice's metrics, or nil. A diagnostic: sluice's own figure.
func scrapeNICBuckets(w *harness.World, clientID string) nicBuckets {
	out, err := w.ScrapeMetrics()
	if err != nil {
		return nil
	}
	labels := []string{`api="produce"`, `direction="produce"`, `entity="` + clientID + `"`, `entity_type="client"`}
	b := nicBuckets{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := produceBucketLine.FindStringSubmatch(sc.Text())
		if m == nil || !hasAll(m[1], labels) {
			continue
		}
		le := bucketBound.FindStringSubmatch(m[1])
		if le == nil {
			continue
		}
		bound, err1 := strconv.ParseFloat(le[1], 64)
		n, err2 := strconv.ParseFloat(m[2], 64)
		if err1 == nil && err2 == nil {
			b[bound] = n
		}
	}
	if len(b) == 0 {
		return nil
	}
	return b
}

func hasAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// nicQuantileMs is the q-quantile, in ms, of what the histogram counted
// between two scrapes (interpolated in log space within its bucket, as
// sluice's own quantiles are), and the number of requests; -1 with none.
func nicQuantileMs(before, after nicBuckets, q float64) (float64, float64) {
	var bounds []float64
	for b := range after {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return -1, 0
	}
	total := after[math.Inf(1)] - before[math.Inf(1)]
	if total <= 0 {
		return -1, 0
	}
	rank, lower, below := q*total, 0.0, 0.0
	for _, ub := range bounds {
		n := after[ub] - before[ub]
		if n >= rank {
			if math.IsInf(ub, 1) {
				return lower * 1e3, total
			}
			if lower <= 0 || n == below {
				return ub * 1e3, total
			}
			f := (rank - below) / (n - below)
			return lower * math.Pow(ub/lower, f) * 1e3, total
		}
		lower, below = ub, n
	}
	return -1, total
}
