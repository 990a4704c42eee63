package configfile

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
)

// Typed readers over Viper (file value, or SLUICE_… environment override).

func (l *loader) has(key string) bool { return l.v.IsSet(key) }

func (l *loader) str(key string) (string, bool) {
	if !l.has(key) {
		return "", false
	}
	v := l.v.Get(key)
	switch v.(type) {
	case map[string]any, []any:
		l.fail(key, "must be a single value")
		return "", false
	case nil:
		return "", false
	}
	return fmt.Sprint(v), true
}

func (l *loader) stringTo(key string, dst *string) {
	if s, ok := l.str(key); ok {
		*dst = s
	}
}

// list accepts a YAML list or a comma-separated string (from the environment).
func (l *loader) list(key string) ([]any, bool) {
	if !l.has(key) {
		return nil, false
	}
	switch v := l.v.Get(key).(type) {
	case []any:
		return v, true
	case string:
		var out []any
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out, true
	case nil:
		return nil, true
	default:
		return []any{v}, true
	}
}

func (l *loader) strings(key string, dst *[]string) {
	items, ok := l.list(key)
	if !ok {
		return
	}
	*dst = nil
	for i, it := range items {
		s := strings.TrimSpace(fmt.Sprint(it))
		if s == "" {
			l.fail(fmt.Sprintf("%s[%d]", key, i), "must not be empty")
			continue
		}
		*dst = append(*dst, s)
	}
}

func (l *loader) float(key string) (float64, bool) {
	f, err := toFloat(l.v.Get(key))
	if err != nil {
		l.fail(key, "%v", err)
		return 0, false
	}
	return f, true
}

func (l *loader) rate(key string) (float64, bool) {
	r, err := config.ParseRate(fmt.Sprint(l.v.Get(key)))
	if err != nil {
		l.fail(key, "%v", err)
		return 0, false
	}
	return r, true
}

func (l *loader) integer(key string, dst *int, lo, hi int) {
	if !l.has(key) {
		return
	}
	f, ok := l.float(key)
	if !ok {
		return
	}
	if f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		l.fail(key, "%v must be a whole number in [%d, %d]", f, lo, hi)
		return
	}
	*dst = int(f)
}

func (l *loader) duration(key string, dst *time.Duration, least time.Duration) {
	s, ok := l.str(key)
	if !ok {
		return
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		l.fail(key, "%q is not a duration (such as 1s, 200ms, 1h)", s)
		return
	}
	if d < least {
		l.fail(key, "%v is below the minimum %v", d, least)
		return
	}
	*dst = d
}

func (l *loader) boolean(key string, dst *bool) {
	s, ok := l.str(key)
	if !ok {
		return
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		l.fail(key, "%q is not true or false", s)
		return
	}
	*dst = b
}

func toFloat(v any) (float64, error) {
	var f float64
	switch n := v.(type) {
	case int:
		f = float64(n)
	case int64:
		f = float64(n)
	case uint64:
		f = float64(n)
	case float64:
		f = n
	case string:
		var err error
		if f, err = strconv.ParseFloat(strings.TrimSpace(n), 64); err != nil {
			return 0, fmt.Errorf("%q is not a number", n)
		}
	default:
		return 0, fmt.Errorf("%v is not a number", v)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%v is not a finite number", v)
	}
	return f, nil
}

func joinKey(section, k string) string {
	if section == "" {
		return k
	}
	return section + "." + k
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest names the closest valid key when a key looks misspelt.
func suggest(k string, valid []string) string {
	best, bestDist := "", 4
	for _, v := range valid {
		if d := editDistance(k, v); d < bestDist {
			best, bestDist = v, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
