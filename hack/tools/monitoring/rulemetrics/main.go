// Command rulemetrics reads Prometheus rule files (plain, or a PrometheusRule's spec) and
// prints, as JSON, each rule's name and the metrics its expression selects, with the
// label names it matches or groups by on each, parsed by Prometheus' own PromQL parser.
//
//	rulemetrics FILE...
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// Rule is one rule and what it reads.
type Rule struct {
	Name string `json:"name"`
	// Metrics are the metric names the expression selects, each with the label names it
	// matches on it or aggregates it by.
	Metrics map[string][]string `json:"metrics"`
}

func main() {
	var out []Rule
	for _, file := range os.Args[1:] {
		rules, err := read(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rulemetrics:", err)
			os.Exit(1)
		}
		out = append(out, rules...)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "rulemetrics:", err)
		os.Exit(1)
	}
}

func read(file string) ([]Rule, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	// A PrometheusRule holds the rule groups in spec; a rule file holds them at the top.
	var wrapped struct {
		Spec rulefmt.RuleGroups `yaml:"spec"`
	}
	groups := &wrapped.Spec
	if err := yaml.Unmarshal(data, &wrapped); err != nil || len(wrapped.Spec.Groups) == 0 {
		groups = &rulefmt.RuleGroups{}
		if err := yaml.Unmarshal(data, groups); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
	}
	var out []Rule
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			expr, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr)
			if err != nil {
				return nil, fmt.Errorf("%s: rule %s%s: %w", file, r.Alert, r.Record, err)
			}
			rule := Rule{Name: r.Alert + r.Record, Metrics: map[string][]string{}}
			collect(expr, nil, rule.Metrics)
			for m, labels := range rule.Metrics {
				sort.Strings(labels)
				rule.Metrics[m] = dedupe(labels)
			}
			out = append(out, rule)
		}
	}
	return out, nil
}

// collect walks the expression: each selector's metric gets the labels it matches and
// the labels the aggregations and vector matchings above it name.
func collect(node parser.Node, above []string, into map[string][]string) {
	switch n := node.(type) {
	case *parser.VectorSelector:
		labels := append([]string{}, above...)
		for _, m := range n.LabelMatchers {
			if m.Name != "__name__" {
				labels = append(labels, m.Name)
			}
		}
		into[n.Name] = append(into[n.Name], labels...)
		return
	case *parser.AggregateExpr:
		above = append(append([]string{}, above...), n.Grouping...)
	case *parser.BinaryExpr:
		if n.VectorMatching != nil {
			above = append(append([]string{}, above...), n.VectorMatching.MatchingLabels...)
		}
	}
	for _, child := range parser.Children(node) {
		collect(child, above, into)
	}
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
