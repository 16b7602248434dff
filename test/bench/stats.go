// Package bench measures the provider's speed and scale against real kube-apiservers:
// the provider runs as its own process, the harness drives Kros and plays Flux, and the
// results are written as JSON and as docs/measurements/benchmarks.md with SVG plots.
package bench

import (
	"math"
	"sort"
	"time"
)

// Dist sums up a distribution of durations, in milliseconds.
type Dist struct {
	Count  int     `json:"count"`
	Median float64 `json:"medianMs"`
	P95    float64 `json:"p95Ms"`
	P99    float64 `json:"p99Ms"`
	Max    float64 `json:"maxMs"`
}

// Summarize computes the median, p95, p99 and max of ds (nearest-rank percentiles).
func Summarize(ds []time.Duration) Dist {
	ms := make([]float64, len(ds))
	for i, d := range ds {
		ms[i] = float64(d) / float64(time.Millisecond)
	}
	return SummarizeMs(ms)
}

// SummarizeMs is Summarize on values that are already in milliseconds.
func SummarizeMs(ms []float64) Dist {
	if len(ms) == 0 {
		return Dist{}
	}
	s := append([]float64(nil), ms...)
	sort.Float64s(s)
	return Dist{
		Count:  len(s),
		Median: round(Percentile(s, 50)),
		P95:    round(Percentile(s, 95)),
		P99:    round(Percentile(s, 99)),
		Max:    round(s[len(s)-1]),
	}
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of sorted values.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// Slope fits y = a + b*x by least squares and returns b and a.
func Slope(xs, ys []float64) (slope, intercept float64) {
	n := float64(len(xs))
	if len(xs) < 2 || len(xs) != len(ys) {
		return 0, 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0, sy / n
	}
	slope = (n*sxy - sx*sy) / den
	return slope, (sy - slope*sx) / n
}

func round(v float64) float64 { return math.Round(v*10) / 10 }
