package bench

import (
	"strconv"
	"strings"
)

// Sample is one line of the Prometheus text format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// ParseProm reads the samples of a Prometheus text exposition; comments and lines it
// cannot read are skipped.
func ParseProm(text string) []Sample {
	var out []Sample
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		s := Sample{Labels: map[string]string{}}
		var rest string
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			s.Name = line[:i]
			parseLabels(line[i+1:j], s.Labels)
			rest = strings.TrimSpace(line[j+1:])
		} else {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			s.Name, rest = f[0], f[1]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		s.Value = v
		out = append(out, s)
	}
	return out
}

func parseLabels(s string, into map[string]string) {
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return
		}
		key := strings.TrimSpace(strings.TrimPrefix(s[:eq], ","))
		var b strings.Builder
		i := eq + 2
		for ; i < len(s); i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				b.WriteByte(s[i])
				continue
			}
			if s[i] == '"' {
				break
			}
			b.WriteByte(s[i])
		}
		into[key] = b.String()
		s = strings.TrimPrefix(s[min(i+1, len(s)):], ",")
	}
}

// Sum adds the values of the samples called name for which keep (nil: all) holds.
func Sum(samples []Sample, name string, keep func(map[string]string) bool) float64 {
	var t float64
	for _, s := range samples {
		if s.Name == name && (keep == nil || keep(s.Labels)) {
			t += s.Value
		}
	}
	return t
}

// SumBy is Sum grouped by the value of key(labels).
func SumBy(samples []Sample, name string, key func(map[string]string) (string, bool)) map[string]float64 {
	out := map[string]float64{}
	for _, s := range samples {
		if s.Name != name {
			continue
		}
		if k, ok := key(s.Labels); ok {
			out[k] += s.Value
		}
	}
	return out
}

// Delta subtracts before from after key by key, dropping zeros.
func Delta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}
