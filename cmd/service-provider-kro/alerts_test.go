package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/config"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// rulesDir holds the monitoring kit's PrometheusRule and its promtool tests.
func rulesDir() string { return filepath.Join(config.Dir(), "monitoring", "rules") }

// writeRuleFile writes the rule groups of config/monitoring's PrometheusRule as a plain
// Prometheus rule file (what promtool reads) into dir, beside a copy of its tests.
func writeRuleFile(g Gomega, dir string) {
	data, err := os.ReadFile(filepath.Join(rulesDir(), "prometheusrule.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var pr struct {
		Kind string         `json:"kind"`
		Spec map[string]any `json:"spec"`
	}
	g.Expect(yaml.Unmarshal(data, &pr)).To(Succeed())
	g.Expect(pr.Kind).To(Equal("PrometheusRule"))
	rules, err := yaml.Marshal(pr.Spec)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644)).To(Succeed())
	data, err = os.ReadFile(filepath.Join(rulesDir(), "rules_test.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	tests, err := withAnnotations(data, pr.Spec)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o644)).To(Succeed())
}

// withAnnotations gives every expected alert of a promtool test file that names no
// annotations the alert's own, as the rule writes them: promtool compares annotations
// too, and the test file spells out only those it templates.
func withAnnotations(tests []byte, spec map[string]any) ([]byte, error) {
	annotations := map[string]any{}
	groups, _ := spec["groups"].([]any)
	for _, grp := range groups {
		rules, _ := grp.(map[string]any)["rules"].([]any)
		for _, r := range rules {
			rule := r.(map[string]any)
			if name, ok := rule["alert"].(string); ok {
				annotations[name] = rule["annotations"]
			}
		}
	}
	var file map[string]any
	if err := yaml.Unmarshal(tests, &file); err != nil {
		return nil, err
	}
	cases, _ := file["tests"].([]any)
	for _, c := range cases {
		checks, _ := c.(map[string]any)["alert_rule_test"].([]any)
		for _, ch := range checks {
			check := ch.(map[string]any)
			alerts, _ := check["exp_alerts"].([]any)
			for _, a := range alerts {
				alert := a.(map[string]any)
				if _, given := alert["exp_annotations"]; !given {
					alert["exp_annotations"] = annotations[check["alertname"].(string)]
				}
			}
		}
	}
	return yaml.Marshal(file)
}

// TestAlertRules checks the monitoring kit's alerts with promtool (built from the
// Prometheus module, cached like the environment's other tools): they load, and each fires
// on the series of its unit tests (config/monitoring/rules/rules_test.yaml) and only then.
func TestAlertRules(t *testing.T) {
	g := NewWithT(t)
	bins, err := testenv.ToolPaths(context.Background(), io.Discard, testenv.Promtool)
	g.Expect(err).NotTo(HaveOccurred())
	dir := t.TempDir()
	writeRuleFile(g, dir)
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(bins[testenv.Promtool.Name], args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// TestAlertsReadExportedMetrics: every metric an alert or the fleet dashboard reads is one
// the provider's binary exports, with every label the alert matches or groups by (or one Prometheus adds to a
// target). The rules are parsed by Prometheus' own parser (hack/tools/monitoring/rulemetrics);
// the metrics are scraped from the binary, run once with leader election and once with
// --sharding (each exports metrics the other does not), after a Kro was reconciled.
func TestAlertsReadExportedMetrics(t *testing.T) {
	g := NewWithT(t)
	bins, err := testenv.ToolPaths(context.Background(), io.Discard, testenv.RuleMetrics)
	g.Expect(err).NotTo(HaveOccurred())
	dashboard := dashboardRules(g, t.TempDir())
	out, err := exec.Command(bins[testenv.RuleMetrics.Name], filepath.Join(rulesDir(), "prometheusrule.yaml"), dashboard).Output()
	g.Expect(err).NotTo(HaveOccurred())
	var rules []struct {
		Name    string              `json:"name"`
		Metrics map[string][]string `json:"metrics"`
	}
	g.Expect(json.Unmarshal(out, &rules)).To(Succeed())
	g.Expect(rules).NotTo(BeEmpty())

	exported := map[string][]string{}
	for _, mode := range [][]string{{"--leader-elect"}, {"--sharding", "--shard-id=alerts"}} {
		for name, labels := range scrapeProvider(t, mode) {
			exported[name] = append(exported[name], labels...)
		}
	}
	// Prometheus adds these to every series of a target (ServiceMonitor, PodMonitor), and
	// makes up for each target.
	targetLabels := []string{"job", "instance", "namespace", "pod", "service", "container", "endpoint"}
	for _, r := range rules {
		for metric, labels := range r.Metrics {
			if metric == "up" {
				continue
			}
			have, ok := exported[metric]
			g.Expect(ok).To(BeTrue(), "alert %s reads %s, which the provider does not export", r.Name, metric)
			for _, l := range labels {
				g.Expect(slices.Contains(have, l) || slices.Contains(targetLabels, l)).To(BeTrue(),
					"alert %s reads label %s of %s, which has only %v", r.Name, l, metric, have)
			}
		}
	}
}

// dashboardRules writes the queries of the fleet dashboard as recording rules (its
// variables $job and $fleet replaced by values they take), so that rulemetrics reads them
// as it reads the alerts, and returns the file.
func dashboardRules(g Gomega, dir string) string {
	data, err := os.ReadFile(filepath.Join(rulesDir(), "dashboard.json"))
	g.Expect(err).NotTo(HaveOccurred())
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	g.Expect(json.Unmarshal(data, &d)).To(Succeed())
	var rules []map[string]string
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			expr := strings.NewReplacer("$job", ".*service-provider-kro", "$fleet", "sum").Replace(t.Expr)
			rules = append(rules, map[string]string{"record": "dashboard:" + strings.ReplaceAll(strings.ToLower(p.Title), " ", "_"), "expr": expr})
		}
	}
	g.Expect(rules).NotTo(BeEmpty())
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	g.Expect(err).NotTo(HaveOccurred())
	file := filepath.Join(dir, "dashboard-rules.yaml")
	g.Expect(os.WriteFile(file, out, 0o644)).To(Succeed())
	return file
}

// scrapeProvider runs the provider with the extra flags on new clusters, reconciles one Kro
// and returns the metrics it exports with their label names (a histogram also under its
// _bucket, _sum and _count names).
func scrapeProvider(t *testing.T, extra []string) map[string][]string {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	onboarding, platform, obPath, pfPath := startProviderClusters(t)
	g.Expect(platform.Client.Create(ctx, namespace("kro-provider"))).To(Succeed())
	g.Expect(onboarding.Client.Create(ctx, namespace("tenant"))).To(Succeed())
	addrs, err := testenv.FreeLoopbackAddrs(2)
	g.Expect(err).NotTo(HaveOccurred())
	runProvider(t, append([]string{"run", "--onboarding-kubeconfig", obPath, "--platform-kubeconfig", pfPath,
		"--pod-namespace", "kro-provider", "--leader-election-namespace", "kro-provider",
		"--metrics-bind-address", addrs[0], "--metrics-secure=false", "--health-probe-bind-address", addrs[1]}, extra...))
	// A ProviderConfig offering a version, and a Kro asking for it: both reconciled, the Kro
	// waiting for its ControlPlane's kubeconfig.
	g.Expect(platform.Client.Create(ctx, &v1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "kro"},
		Spec: v1alpha1.ProviderConfigSpec{Versions: []v1alpha1.KroVersion{{
			Version: "v0.9.4", ChartVersion: "0.9.4", ChartURL: "oci://registry.example.com/kro/charts/kro",
		}}},
	})).To(Succeed())
	kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "cp"}, Spec: v1alpha1.KroSpec{Version: "v0.9.4"}}
	g.Expect(onboarding.Client.Create(ctx, kro)).To(Succeed())
	families := map[string][]string{}
	g.Eventually(func(g Gomega) {
		resp, err := http.Get("http://" + addrs[0] + "/metrics")
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		parser := expfmt.NewTextParser(model.UTF8Validation)
		parsed, err := parser.TextToMetricFamilies(bytes.NewReader(body))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(parsed).To(HaveKey("service_provider_kro_reconcile_outcomes_total"), "the Kro was reconciled")
		g.Expect(parsed).To(HaveKey("service_provider_kro_version_kros"), "the ProviderConfig's status counts the Kro")
		for name, f := range parsed {
			var labels []string
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetName())
				}
			}
			slices.Sort(labels)
			labels = slices.Compact(labels)
			families[name] = labels
			if f.GetType().String() == "HISTOGRAM" {
				families[name+"_bucket"] = append(slices.Clone(labels), "le")
				families[name+"_sum"], families[name+"_count"] = labels, labels
			}
		}
	}, rbacTimeout, rbacInterval).Should(Succeed())
	return families
}
