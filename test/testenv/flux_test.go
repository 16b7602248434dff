//go:build e2e

package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestFluxInstallsKroOnKwokControlPlane is the proof of the end-to-end environment: a
// platform cluster with Flux, a TLS registry with basic auth holding the real kro
// chart, and a kwok ControlPlane. Flux installs kro on the ControlPlane from the
// registry; kro's controller, run as a process, then serves a ResourceGraphDefinition.
func TestFluxInstallsKroOnKwokControlPlane(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	log := testLog{t}
	dir := os.Getenv("TESTENV_LOG_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else {
		var err error
		dir, err = os.MkdirTemp(dir, "flux-e2e-")
		g.Expect(err).NotTo(HaveOccurred())
	}
	t.Logf("processes log into %s", dir)
	timings := map[string]time.Duration{}
	step := func(name string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		timings[name] = time.Since(start)
		t.Logf("timing: %-28s %s", name, timings[name].Round(100*time.Millisecond))
	}
	defer func() {
		for _, name := range []string{"build", "clusters", "registry", "publish charts", "flux", "control plane cp-1", "bring-up", "helm release ready", "kro controller", "rgd ready"} {
			if d, ok := timings[name]; ok {
				fmt.Printf("testenv timing: %-22s %s\n", name, d.Round(100*time.Millisecond))
			}
		}
	}()

	var env *E2E
	step("bring-up", func() {
		var err error
		env, err = StartE2E(ctx, log, E2EOptions{Dir: dir, ControlPlanes: []string{"cp-1"}})
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() {
			if err := env.Stop(); err != nil {
				t.Logf("stopping the environment: %v", err)
			}
		})
		for _, tm := range env.Timings {
			timings[tm.Step] = tm.Duration
		}
	})
	platform, reg, cp := env.Platform, env.Registry, env.ControlPlane("cp-1")

	pc := platform.Client
	const ns = "tenant-a"
	g.Expect(pc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	g.Expect(pc.Create(ctx, reg.PullSecret(ns, "registry-credentials"))).To(Succeed())
	g.Expect(pc.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cp-1-kubeconfig"},
		Data:       map[string][]byte{"value": cp.Kubeconfig},
	})).To(Succeed())
	repo := &sourcev1.OCIRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kro"},
		Spec: sourcev1.OCIRepositorySpec{
			URL:       env.ChartURL,
			Reference: &sourcev1.OCIRepositoryRef{Tag: "0.9.4"},
			LayerSelector: &sourcev1.OCILayerSelector{
				MediaType: "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
				Operation: sourcev1.OCILayerCopy,
			},
			SecretRef: &meta.LocalObjectReference{Name: "registry-credentials"},
			Interval:  metav1.Duration{Duration: time.Minute},
		},
	}
	g.Expect(pc.Create(ctx, repo)).To(Succeed())
	hr := &helmv2.HelmRelease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kro"},
		Spec: helmv2.HelmReleaseSpec{
			ChartRef:         &helmv2.CrossNamespaceSourceReference{Kind: sourcev1.OCIRepositoryKind, Name: repo.Name},
			Interval:         metav1.Duration{Duration: time.Minute},
			KubeConfig:       &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "cp-1-kubeconfig", Key: "value"}},
			ReleaseName:      "kro",
			TargetNamespace:  "kro-system",
			StorageNamespace: "kro-system",
			Install:          &helmv2.Install{CreateNamespace: true, CRDs: helmv2.CreateReplace},
			Upgrade:          &helmv2.Upgrade{CRDs: helmv2.CreateReplace},
		},
	}
	g.Expect(pc.Create(ctx, hr)).To(Succeed())

	step("helm release ready", func() {
		g.Eventually(func(g Gomega) {
			g.Expect(pc.Get(ctx, client.ObjectKeyFromObject(repo), repo)).To(Succeed())
			g.Expect(pc.Get(ctx, client.ObjectKeyFromObject(hr), hr)).To(Succeed())
			ready := apimeta.FindStatusCondition(hr.Status.Conditions, meta.ReadyCondition)
			g.Expect(ready).NotTo(BeNil(), "HelmRelease has no Ready condition; OCIRepository: %v", repo.Status.Conditions)
			g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "HelmRelease: %s; OCIRepository: %v", ready.Message, repo.Status.Conditions)
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	})
	t.Logf("HelmRelease ready: chart %s", hr.Status.History.Latest().ChartVersion)

	cc := cp.Client
	var deployments appsv1.DeploymentList
	g.Expect(cc.List(ctx, &deployments, client.InNamespace("kro-system"))).To(Succeed())
	g.Expect(deployments.Items).NotTo(BeEmpty())
	for _, d := range deployments.Items {
		available := false
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
				available = true
			}
		}
		g.Expect(available).To(BeTrue(), "deployment %s is not Available: %v", d.Name, d.Status.Conditions)
	}
	g.Expect(cc.Get(ctx, client.ObjectKey{Name: "resourcegraphdefinitions.kro.run"}, &apiextensionsv1.CustomResourceDefinition{})).To(Succeed())

	step("kro controller", func() {
		kro, err := StartKroController(ctx, log, KroControllerOptions{Kubeconfig: cp.Kubeconfig, Dir: filepath.Join(dir, "kro")})
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = kro.Stop() })
	})

	rgd := ConfigMapRGD("testenv-app", "TestenvApp")
	g.Expect(cc.Create(ctx, rgd)).To(Succeed())
	step("rgd ready", func() {
		g.Eventually(func(g Gomega) {
			g.Expect(cc.Get(ctx, client.ObjectKeyFromObject(rgd), rgd)).To(Succeed())
			conds, _, _ := unstructured.NestedSlice(rgd.Object, "status", "conditions")
			var ready map[string]any
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
					ready = m
				}
			}
			g.Expect(ready).NotTo(BeNil(), "RGD status: %v", rgd.Object["status"])
			g.Expect(ready["status"]).To(Equal("True"), "RGD status: %v", rgd.Object["status"])
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	})
}
