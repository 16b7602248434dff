package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
)

// earlierImageRef is the earlier provider's image at its newest release.
const earlierImageRef = "ghcr.io/openmcp-project/images/service-provider-kro:v1.4.0"

// TestPreflightWhoServes: preflight reports another installation's claim on the
// onboarding cluster and the earlier provider while it still runs, each as something to
// fix, and exits as main does: 0 with nothing to fix, 1 with something to fix, 2 when it
// could not check, and 0 for -h.
func TestPreflightWhoServes(t *testing.T) {
	obOpts, pfOpts := providerClusterOptions(t)
	cs := startClusters(t, obOpts, pfOpts)
	onboarding, platform := cs[0].Client, cs[1].Client
	obPath, pfPath := writeKubeconfigs(t, cs[0], cs[1])
	ctx := context.Background()
	g := NewWithT(t)
	g.Expect(platform.Create(ctx, namespace("kro-provider"))).To(Succeed())
	// Pods need the namespace's ServiceAccount, which no controller makes here.
	g.Expect(platform.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "kro-provider"}})).To(Succeed())
	g.Expect(platform.Create(ctx, &v1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "kro"},
		Spec: v1alpha1.ProviderConfigSpec{Versions: []v1alpha1.KroVersion{{
			Version: "v0.9.4", ChartVersion: "0.9.4", ChartURL: "registry.example.com/kro/charts/kro",
		}}},
	})).To(Succeed())
	preflight := func(extra ...string) (int, string) {
		var out bytes.Buffer
		args := append([]string{"preflight", "--onboarding-kubeconfig", obPath, "--platform-kubeconfig", pfPath, "--pod-namespace", "kro-provider"}, extra...)
		code := execute(ctx, args, &out, &out)
		return code, out.String()
	}
	self := installationOn(g, platform, standaloneEnvironment, "kro-provider")

	t.Run("nothing to fix: exit 0", func(t *testing.T) {
		g := NewWithT(t)
		code, out := preflight()
		g.Expect(code).To(Equal(0), out)
		g.Expect(out).To(ContainSubstring("ok    the onboarding cluster is not claimed yet: init and run claim it for installation " + self.String()))
		g.Expect(out).To(ContainSubstring("ok    the earlier provider (service-provider-kro before 1.5.0) does not run in namespace kro-provider on the platform cluster"))
		g.Expect(out).To(ContainSubstring("nothing to fix"))
	})

	t.Run("-h: exit 0", func(t *testing.T) {
		g := NewWithT(t)
		for _, args := range [][]string{{"preflight", "-h"}, {"init", "-h"}, {"-h"}} {
			var out bytes.Buffer
			g.Expect(execute(ctx, args, &out, &out)).To(Equal(0), "%v", args)
			g.Expect(out.String()).To(MatchRegexp("(?i)usage"), "%v", args)
		}
	})

	t.Run("a claim held by another installation: reported, exit 1", func(t *testing.T) {
		g := NewWithT(t)
		other := self
		other.Namespace = "kro-other"
		setClaim(g, onboarding, other.Claim())
		code, out := preflight()
		g.Expect(code).To(Equal(1), out)
		g.Expect(out).To(ContainSubstring("FIX   installation " + self.String() + " cannot serve this onboarding cluster: installation " + other.String() + " serves it"))
		g.Expect(out).To(ContainSubstring(releaseHint))
		g.Expect(out).To(ContainSubstring("1 to fix before the switch"))

		setClaim(g, onboarding, self.Claim())
		code, out = preflight()
		g.Expect(code).To(Equal(0), out)
		g.Expect(out).To(ContainSubstring("ok    the onboarding cluster is claimed by this installation (" + self.String() + ")"))
	})

	t.Run("an earlier provider still running: reported, exit 1", func(t *testing.T) {
		g := NewWithT(t)
		labels := map[string]string{"app": "sp-kro"}
		template := corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "sp", Image: earlierImageRef, Args: []string{"run", "--environment", "default"}}}},
		}
		depl := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "sp-kro", Namespace: "kro-provider"},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template},
		}
		g.Expect(platform.Create(ctx, depl)).To(Succeed())
		// This release's own Deployment is not the earlier provider.
		ours := depl.DeepCopy()
		ours.ObjectMeta = metav1.ObjectMeta{Name: "sp-kro-new", Namespace: "kro-provider"}
		ours.Spec.Template.Spec.Containers[0].Image = "ghcr.io/openmcp-project/images/service-provider-kro:v1.5.0"
		g.Expect(platform.Create(ctx, ours)).To(Succeed())
		code, out := preflight()
		g.Expect(code).To(Equal(1), out)
		g.Expect(out).To(ContainSubstring("FIX   the earlier provider still runs on the platform cluster: Deployment kro-provider/sp-kro (" + earlierImageRef + ", 1 replicas); two providers would act on the same Kros"))
		g.Expect(out).NotTo(ContainSubstring("sp-kro-new"))

		// Scaled to 0, its pod (no controllers run here: made by hand) is still there.
		g.Expect(platform.Patch(ctx, depl, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`)))).To(Succeed())
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sp-kro-5d8f7c9b6-x2k4q", Namespace: "kro-provider", Labels: labels}, Spec: template.Spec}
		g.Expect(platform.Create(ctx, pod)).To(Succeed())
		code, out = preflight()
		g.Expect(code).To(Equal(1), out)
		g.Expect(out).To(ContainSubstring("FIX   the earlier provider still runs on the platform cluster: pod kro-provider/sp-kro-5d8f7c9b6-x2k4q (" + earlierImageRef + ")"))
		g.Expect(out).NotTo(ContainSubstring("Deployment kro-provider/sp-kro "))

		g.Expect(platform.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
		g.Eventually(func() error { return platform.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}) }, rbacTimeout, rbacInterval).ShouldNot(Succeed())
		code, out = preflight()
		g.Expect(code).To(Equal(0), out)
	})

	t.Run("a cluster it cannot reach, or a wrong flag: exit 2", func(t *testing.T) {
		g := NewWithT(t)
		unreachable := filepath.Join(t.TempDir(), "unreachable.yaml")
		g.Expect(os.WriteFile(unreachable, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600)).To(Succeed())
		var out bytes.Buffer
		code := execute(ctx, []string{"preflight", "--onboarding-kubeconfig", unreachable, "--platform-kubeconfig", pfPath}, &out, &out)
		g.Expect(code).To(Equal(2), out.String())
		g.Expect(out.String()).To(ContainSubstring("error: preflight: the " + clusters.Onboarding + " cluster"))
		g.Expect(out.String()).To(ContainSubstring("nothing was checked to the end"))

		code, out2 := preflight("--no-such-flag")
		g.Expect(code).To(Equal(2), out2)
	})
}
