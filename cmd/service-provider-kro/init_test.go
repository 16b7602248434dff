package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/config/crd"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

func TestInit(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cs := startClusters(t, testenv.ClusterOptions{Name: "onboarding"}, testenv.ClusterOptions{Name: "platform"})
	onboarding, platform := cs[0], cs[1]
	obPath, pfPath := writeKubeconfigs(t, onboarding, platform)
	dir := filepath.Dir(obPath)
	args := []string{"init", "--onboarding-kubeconfig", obPath, "--platform-kubeconfig", pfPath}

	runInitOK := func() string {
		var out, errOut bytes.Buffer
		g.Expect(dispatch(ctx, args, &out, &errOut)).To(Succeed(), errOut.String())
		return out.String()
	}
	resourceVersion := func(c client.Client, name string) string {
		obj := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, obj)).To(Succeed())
		return obj.ResourceVersion
	}
	absent := func(c client.Client, name string) bool {
		err := c.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{})
		return client.IgnoreNotFound(err) == nil && err != nil
	}

	t.Run("installs each CRD on its own cluster", func(t *testing.T) {
		g := NewWithT(t)
		out := runInitOK()
		g.Expect(out).To(ContainSubstring("onboarding cluster: CRDs " + kroCRD + " (applied " + kroCRD + ")"))
		g.Expect(out).To(ContainSubstring("platform cluster: CRDs " + providerConfigCRD + " (applied " + providerConfigCRD + ")"))
		g.Expect(resourceVersion(onboarding.Client, kroCRD)).NotTo(BeEmpty())
		g.Expect(resourceVersion(platform.Client, providerConfigCRD)).NotTo(BeEmpty())
		g.Expect(absent(onboarding.Client, providerConfigCRD)).To(BeTrue(), "ProviderConfig belongs on the platform cluster only")
		g.Expect(absent(platform.Client, kroCRD)).To(BeTrue(), "Kro belongs on the onboarding cluster only")
		// init waited until the CRDs were established: their kinds are served right away.
		kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: "cp", Namespace: "default"}, Spec: v1alpha1.KroSpec{Version: "v1"}}
		g.Expect(onboarding.Client.Create(ctx, kro)).To(Succeed())
	})

	t.Run("a second init changes nothing", func(t *testing.T) {
		g := NewWithT(t)
		before := [2]string{resourceVersion(onboarding.Client, kroCRD), resourceVersion(platform.Client, providerConfigCRD)}
		out := runInitOK()
		g.Expect(out).To(ContainSubstring("(up to date)"))
		g.Expect(out).NotTo(ContainSubstring("applied"))
		g.Expect([2]string{resourceVersion(onboarding.Client, kroCRD), resourceVersion(platform.Client, providerConfigCRD)}).To(Equal(before))
	})

	t.Run("an older CRD is upgraded", func(t *testing.T) {
		g := NewWithT(t)
		embedded, err := crd.ForCluster(clusters.Onboarding)
		g.Expect(err).NotTo(HaveOccurred())
		old := embedded[0].DeepCopy()
		old.Spec.Versions[0].AdditionalPrinterColumns = old.Spec.Versions[0].AdditionalPrinterColumns[:1]
		delete(old.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties, "resourceGraphDefinitions")
		_, err = clusters.InstallCRDs(ctx, onboarding.Client, []*apiextensionsv1.CustomResourceDefinition{old})
		g.Expect(err).NotTo(HaveOccurred())

		out := runInitOK()
		g.Expect(out).To(ContainSubstring("onboarding cluster: CRDs " + kroCRD + " (applied " + kroCRD + ")"))
		got := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(onboarding.Client.Get(ctx, client.ObjectKey{Name: kroCRD}, got)).To(Succeed())
		g.Expect(got.Spec.Versions[0].AdditionalPrinterColumns).To(Equal(embedded[0].Spec.Versions[0].AdditionalPrinterColumns))
		g.Expect(got.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties).To(HaveKey("resourceGraphDefinitions"))
	})

	t.Run("an unreachable cluster fails with a clear message", func(t *testing.T) {
		g := NewWithT(t)
		bad := filepath.Join(dir, "unreachable.kubeconfig")
		data := regexp.MustCompile(`server: \S+`).ReplaceAllString(string(platform.Kubeconfig), "server: https://127.0.0.1:1")
		g.Expect(data).To(ContainSubstring("server: https://127.0.0.1:1"))
		g.Expect(os.WriteFile(bad, []byte(data), 0o600)).To(Succeed())
		var out, errOut bytes.Buffer
		err := dispatch(ctx, []string{"init", "--onboarding-kubeconfig", obPath, "--platform-kubeconfig", bad}, &out, &errOut)
		g.Expect(err).To(MatchError(ContainSubstring("init on the platform cluster: connecting to https://127.0.0.1:1: ")))
	})

	t.Run("a missing kubeconfig fails with a clear message", func(t *testing.T) {
		g := NewWithT(t)
		var out, errOut bytes.Buffer
		err := dispatch(ctx, []string{"init", "--onboarding-kubeconfig", filepath.Join(dir, "nope")}, &out, &errOut)
		g.Expect(err).To(MatchError(ContainSubstring("init on the onboarding cluster: reading the onboarding cluster's kubeconfig")))
	})
}

func TestDispatchRejectsUnknownCommands(t *testing.T) {
	g := NewWithT(t)
	var out, errOut bytes.Buffer
	g.Expect(dispatch(context.Background(), []string{"frobnicate"}, &out, &errOut)).To(MatchError(`unknown command "frobnicate"`))
	g.Expect(errOut.String()).To(ContainSubstring("usage: service-provider-kro"))
	g.Expect(dispatch(context.Background(), nil, &out, &errOut)).To(MatchError("no command given"))
}

func TestRunRejectsNonPositiveClientRates(t *testing.T) {
	g := NewWithT(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600)).To(Succeed())
	for _, flags := range [][]string{{"--kube-api-qps=0"}, {"--kube-api-burst=-1"}} {
		var out, errOut bytes.Buffer
		args := append([]string{"run", "--onboarding-kubeconfig", kubeconfig, "--platform-kubeconfig", kubeconfig, "--pod-namespace", "p"}, flags...)
		g.Expect(dispatch(context.Background(), args, &out, &errOut)).To(MatchError("--kube-api-qps and --kube-api-burst must be positive"), "%v", flags)
	}
}
