package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// rateUnits maps suffixes to bytes. Binary units (KiB, MiB…) are what
// Kafka operators usually mean; decimal units are accepted as written.
var rateUnits = []struct {
	suffix string
	bytes  float64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"kB", 1e3}, {"B", 1},
	// Bits per second, as NIC speeds and tc are quoted (decimal).
	{"Tbit", 1e12 / 8}, {"tbit", 1e12 / 8}, {"Gbit", 1e9 / 8}, {"gbit", 1e9 / 8},
	{"Mbit", 1e6 / 8}, {"mbit", 1e6 / 8}, {"Kbit", 1e3 / 8}, {"kbit", 1e3 / 8}, {"bit", 1.0 / 8},
}

// MaxRate is the largest rate any key takes, in bytes/s: 1 Tbit/s, beyond
// any NIC a broker has, and small enough that every conversion downstream
// stays exact (HTB's rate and ceiling in bits/s as uint64, its bursts of
// 10 ms as uint32 bytes).
const MaxRate = 1e12 / 8

// ParseRate reads a rate in bytes per second: a plain number, or a number
// with a unit ("50MiB", "1.5GB", "800KiB/s"). Negative, NaN and infinite
// values are errors; callers that allow -1 check for it first.
func ParseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(t, "/s")
	mult := 1.0
	for _, u := range rateUnits {
		if strings.HasSuffix(t, u.suffix) {
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			mult = u.bytes
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a rate (use bytes/s or a unit such as 50MiB, 1GB, 10Gbit)", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	if r := v * mult; r > MaxRate || math.IsInf(r, 0) {
		return 0, fmt.Errorf("%q is above the largest rate sluice takes, 1Tbit (125GB/s)", s)
	}
	return v * mult, nil
}

// FormatRate prints a rate in the largest binary unit that keeps it readable.
func FormatRate(v float64) string {
	if math.IsInf(v, 1) {
		return "unlimited"
	}
	for _, u := range []struct {
		suffix string
		bytes  float64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if v >= u.bytes {
			return strconv.FormatFloat(math.Round(v/u.bytes*1000)/1000, 'f', -1, 64) + u.suffix
		}
	}
	return strconv.FormatFloat(v, 'f', -1, 64) + "B"
}
