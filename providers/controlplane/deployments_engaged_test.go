package controlplane_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/providers/controlplane"
)

// deployment is a Deployment in kro-system whose pod template weighs templateBytes.
func deployment(name string, labels map[string]string, templateBytes int) *appsv1.Deployment {
	sel := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: clusters.KroNamespace, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x",
					Env: []corev1.EnvVar{{Name: "PAD", Value: strings.Repeat("p", templateBytes)}}}}},
			},
		},
	}
}

// TestKrosDeploymentsAreWatchedTrimmed: an engaged ControlPlane's cache holds only the
// Deployments in kro-system with kro's release labels, each without its pod template,
// and a change of one reaches the ControlPlane's object at once.
func TestKrosDeploymentsAreWatchedTrimmed(t *testing.T) {
	withProvider(t)
	g := NewWithT(t)
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "deploy", Name: "cp-a"}
	name := controlplane.ClusterName(key)
	kro := map[string]string{controlplane.LabelInstance: "kro", controlplane.LabelHelmManagedBy: controlplane.HelmManagedBy}
	for _, d := range []*appsv1.Deployment{deployment("kro", kro, 256<<10), deployment("lookalike", kro, 256<<10), deployment("other", map[string]string{"app": "other"}, 16)} {
		g.Expect(cpA.Client.Create(ctx, d)).To(Succeed())
		t.Cleanup(func() { _ = cpA.Client.Delete(context.Background(), d) })
	}
	_, err := provider.Ensure(name, cpA.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { provider.Remove(context.Background(), name) })
	cl := engaged(g, name)

	list := &appsv1.DeploymentList{}
	eventually(g, func(g Gomega) {
		g.Expect(cl.GetCache().List(ctx, list, client.InNamespace(clusters.KroNamespace))).To(Succeed())
		g.Expect(list.Items).To(ConsistOf(HaveField("Name", "kro"), HaveField("Name", "lookalike")), "only the Deployments with kro's release labels")
	}).Should(Succeed())
	for _, d := range list.Items {
		g.Expect(d.Spec.Template.Spec.Containers).To(BeEmpty(), "the pod template of %s is not kept", d.Name)
		g.Expect(d.Labels).To(Equal(kro))
	}

	before := seen.count(key)
	scaled := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: clusters.KroNamespace, Name: "kro"}}
	g.Expect(cpA.Client.Patch(ctx, scaled, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`)))).To(Succeed())
	eventually(g, func() int { return seen.count(key) }).Should(BeNumerically(">", before), "kro's Deployment scaled reaches the Kro")
}
