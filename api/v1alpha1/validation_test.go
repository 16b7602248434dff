package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	. "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/config/crd"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// k is a client of a real kube-apiserver with the provider's CRDs installed.
var k client.Client

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	crds, err := crd.All()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cs, err := testenv.StartClusters(context.Background(), testenv.ClusterOptions{Name: "api", CRDs: crds})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer testenv.StopClusters(cs...)
	k = cs[0].Client
	return m.Run()
}

func version(v, chart string) KroVersion { return KroVersion{Version: v, ChartVersion: chart} }

func providerConfig(name string, mutate func(*ProviderConfigSpec)) *ProviderConfig {
	pc := &ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       ProviderConfigSpec{Versions: []KroVersion{version("v0.9.3", "0.9.3")}},
	}
	if mutate != nil {
		mutate(&pc.Spec)
	}
	return pc
}

func TestProviderConfigRejectsInvalidSpecs(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*ProviderConfigSpec)
		want   string
	}{
		{"no versions", func(s *ProviderConfigSpec) { s.Versions = nil }, "spec.versions: Required value"},
		{"empty versions", func(s *ProviderConfigSpec) { s.Versions = []KroVersion{} }, "spec.versions: Invalid value"},
		{"duplicate versions", func(s *ProviderConfigSpec) {
			s.Versions = []KroVersion{version("v1", "1.0.0"), version("v1", "1.0.1")}
		}, "spec.versions[1]: Duplicate value"},
		{"missing chartVersion", func(s *ProviderConfigSpec) { s.Versions[0].ChartVersion = "" }, "spec.versions[0].chartVersion"},
		{"missing version", func(s *ProviderConfigSpec) { s.Versions[0].Version = "" }, "spec.versions[0].version"},
		{"http chartURL", func(s *ProviderConfigSpec) { s.Versions[0].ChartURL = "https://charts.example.com/kro" },
			"chartURL must be an OCI URL: use the oci:// scheme or leave the scheme out"},
		{"chartVersion with a slash", func(s *ProviderConfigSpec) { s.Versions[0].ChartVersion = "0.9/3" },
			"chartVersion must be a valid chart tag"},
		{"version with a space", func(s *ProviderConfigSpec) { s.Versions[0].Version = "v 1" }, "version must start with a letter or digit"},
		{"uppercase secret name", func(s *ProviderConfigSpec) { s.Versions[0].ChartPullSecret = "My_Secret" },
			"chartPullSecret must be a valid Secret name"},
		{"helmValues not an object", func(s *ProviderConfigSpec) {
			s.Versions[0].HelmValues = &apiextensionsv1.JSON{Raw: []byte(`["a","b"]`)}
		}, "spec.versions[0].helmValues: Invalid value: \"array\": spec.versions[0].helmValues in body must be of type object"},
		{"pollInterval below minimum", func(s *ProviderConfigSpec) { s.PollInterval = &metav1.Duration{Duration: 5e9} },
			"pollInterval must be between 10s and 24h"},
		{"pollInterval above maximum", func(s *ProviderConfigSpec) { s.PollInterval = &metav1.Duration{Duration: 25 * 3600e9} },
			"pollInterval must be between 10s and 24h"},
		{"over-long version", func(s *ProviderConfigSpec) { s.Versions[0].Version = strings.Repeat("v", 65) },
			"spec.versions[0].version: Too long: may not be more than 64 bytes"},
		{"over-long chartURL", func(s *ProviderConfigSpec) {
			s.Versions[0].ChartURL = "oci://example.com/" + strings.Repeat("a", 512)
		}, "spec.versions[0].chartURL: Too long"},
		{"over-long secret name", func(s *ProviderConfigSpec) { s.Versions[0].ChartPullSecret = strings.Repeat("a", 254) },
			"spec.versions[0].chartPullSecret: Too long"},
		{"maxUnavailable 0", func(s *ProviderConfigSpec) { s.Rollout = &RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromInt32(0))} },
			"maxUnavailable must be at least 1, or a percentage from 1% to 100%"},
		{"maxUnavailable 0%", func(s *ProviderConfigSpec) {
			s.Rollout = &RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromString("0%"))}
		},
			"maxUnavailable must be at least 1, or a percentage from 1% to 100%"},
		{"maxUnavailable 150%", func(s *ProviderConfigSpec) {
			s.Rollout = &RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromString("150%"))}
		},
			"maxUnavailable must be at least 1, or a percentage from 1% to 100%"},
		{"failureThreshold 0", func(s *ProviderConfigSpec) { s.Rollout = &RolloutPolicy{FailureThreshold: ptr.To[int32](0)} },
			"spec.rollout.failureThreshold"},
		{"fluxShards key not a label value", func(s *ProviderConfigSpec) { s.FluxShards = []string{"shard 1"} },
			"spec.fluxShards[0]: Invalid value"},
		{"fluxShards key twice", func(s *ProviderConfigSpec) { s.FluxShards = []string{"a", "a"} },
			"spec.fluxShards[1]: Duplicate value"},
		{"healthTimeout 1s", func(s *ProviderConfigSpec) {
			s.Rollout = &RolloutPolicy{HealthTimeout: &metav1.Duration{Duration: 1e9}}
		},
			"healthTimeout must be between 30s and 24h"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := k.Create(context.Background(), providerConfig(fmt.Sprintf("invalid-%d", i), tc.mutate))
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}
}

func TestProviderConfigAcceptsValidSpecsWithDefaults(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	pc := providerConfig("valid", func(s *ProviderConfigSpec) {
		s.Versions = []KroVersion{
			version("v0.9.3", "0.9.3"),
			{
				Version:         "v0.9.4",
				ChartVersion:    "0.9.4",
				ChartURL:        "registry.example.com/kro/charts/kro",
				ChartPullSecret: "registry-credentials",
				HelmValues:      &apiextensionsv1.JSON{Raw: []byte(`{"imagePullSecrets":[{"name":"pull"}],"rbac":{"mode":"aggregation"}}`)},
			},
			{Version: "product-2026.1", ChartVersion: "0.9.4+build.1", ChartURL: "oci://other.example.com/kro"},
		}
	})
	g.Expect(k.Create(ctx, pc)).To(Succeed())

	got := &ProviderConfig{}
	g.Expect(k.Get(ctx, client.ObjectKey{Name: "valid"}, got)).To(Succeed())
	g.Expect(got.Spec.PollInterval).NotTo(BeNil())
	g.Expect(got.Spec.PollInterval.Duration.String()).To(Equal("1m0s"))
	g.Expect(got.Spec.Versions[0].ChartURL).To(Equal(DefaultChartURL))
	g.Expect(got.Spec.Versions[1].ChartURL).To(Equal("registry.example.com/kro/charts/kro"), "a URL without scheme is kept; the provider adds oci://")
	g.Expect(string(got.Spec.Versions[1].HelmValues.Raw)).To(MatchJSON(`{"imagePullSecrets":[{"name":"pull"}],"rbac":{"mode":"aggregation"}}`))

	// A rollout policy gets its defaults.
	got.Spec.Rollout = &RolloutPolicy{MaxUnavailable: ptr.To(intstr.FromString("25%"))}
	g.Expect(k.Update(ctx, got)).To(Succeed())
	g.Expect(got.Spec.Rollout.FailureThreshold).To(Equal(ptr.To[int32](1)))
	g.Expect(got.Spec.Rollout.HealthTimeout.Duration.String()).To(Equal("10m0s"))

	// Editing keeps the rules: a second entry with the same version is refused.
	got.Spec.Versions = append(got.Spec.Versions, version("v0.9.3", "0.9.5"))
	err := k.Update(ctx, got)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("Duplicate value"))
}

func TestKroValidation(t *testing.T) {
	ctx := context.Background()
	ns := "kro-validation"
	g := NewWithT(t)
	g.Expect(k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())

	cases := []struct {
		name    string
		version string
		want    string
	}{
		{"empty version", "", "spec.version: Invalid value: \"\": spec.version in body should be at least 1 chars long"},
		{"over-long version", strings.Repeat("1", 65), "spec.version: Too long: may not be more than 64 bytes"},
		{"version with a slash", "v0.9/3", "version must start with a letter or digit"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			kro := &Kro{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bad-%d", i), Namespace: ns}, Spec: KroSpec{Version: tc.version}}
			err := k.Create(ctx, kro)
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}

	t.Run("valid", func(t *testing.T) {
		g := NewWithT(t)
		kro := &Kro{ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Namespace: ns}, Spec: KroSpec{Version: "v0.9.3"}}
		g.Expect(k.Create(ctx, kro)).To(Succeed())
		kro.Status.Phase = PhaseProgressing
		kro.Status.ObservedGeneration = kro.Generation
		g.Expect(k.Status().Update(ctx, kro)).To(Succeed())
		kro.Status.Phase = "Broken"
		err := k.Status().Update(ctx, kro)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "an unknown phase is refused, got %v", err)
	})
}
