package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/openmcp-project/openmcp-operator/api/constants"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/placement/credentialtest"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
)

// TestForeignKroCredentialIsAConflict: a secret named kro-controlplane-access in the
// tenant's namespace on the workload cluster that the provider did not make (the
// workload cluster's cache never holds it) is neither overwritten nor deleted: the Kro
// reports the conflict, naming the secret and what to do, with a Warning event.
func TestForeignKroCredentialIsAConflict(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	const name = "cp-foreign-cred"
	workloadNS, err := reach.WorkloadNamespace(types.NamespacedName{Namespace: ns, Name: name})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bareControlPlane.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloadNS}})).To(Succeed())
	foreign := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: workloadNS, Name: owned.KroCredentialSecretName, Labels: map[string]string{"owner": "someone"}},
		Data:       map[string][]byte{owned.KubeconfigKey: []byte("theirs")},
	}
	g.Expect(bareControlPlane.Client.Create(ctx, foreign)).To(Succeed())
	untouched := func(g Gomega) {
		got := &corev1.Secret{}
		g.Expect(bareControlPlane.Client.Get(ctx, client.ObjectKeyFromObject(foreign), got)).To(Succeed())
		g.Expect(got.UID).To(Equal(foreign.UID))
		g.Expect(got.ResourceVersion).To(Equal(foreign.ResourceVersion), "not written")
		g.Expect(got.Data).To(Equal(foreign.Data))
		g.Expect(got.Labels).To(Equal(foreign.Labels))
	}

	k, _ := placeWorkloadKro(t, g, ns, name)
	got := eventuallyCondition(g, k, v1alpha1.ConditionKroCredentialReady, metav1.ConditionFalse, v1alpha1.ReasonOwnershipConflict,
		"secret "+workloadNS+"/"+owned.KroCredentialSecretName+" on the workload cluster was not created by the provider", "delete that secret or move it elsewhere")
	expectLegacy(g, got, v1alpha1.ConditionKroCredentialReady)
	g.Expect(condition(got, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonOwnershipConflict))
	g.Expect(condition(got, v1alpha1.ConditionWorkloadClusterReady).Message).NotTo(ContainSubstring("theirs"), "no secret content in messages")
	eventuallyEvent(g, k, "Warning/"+v1alpha1.ReasonOwnershipConflict+": "+v1alpha1.ConditionKroCredentialReady+": ", workloadNS+"/"+owned.KroCredentialSecretName)
	g.Consistently(untouched, time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(getHelmReleaseIfAny(g, k)).To(BeNil(), "kro is not installed to mount someone else's secret")

	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
	untouched(g)
}

// TestWorkloadKubeconfigIsChosenByName: standalone, of several labelled kubeconfig
// secrets for the workload cluster in the tenant namespace, the first by name is used,
// reconcile after reconcile.
func TestWorkloadKubeconfigIsChosenByName(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	const name = "cp-choice"
	tenant := tenantNamespace(g, &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	g.Expect(platform.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}})).To(Succeed())
	for _, secret := range []string{"z-workload", "a-workload"} {
		g.Expect(platform.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: tenant, Labels: map[string]string{v1alpha1.LabelWorkloadClusterKubeconfig: "true"}},
			Data:       map[string][]byte{owned.KubeconfigKey: bareControlPlane.Kubeconfig},
		})).To(Succeed())
	}
	k, _ := placeWorkloadKro(t, g, ns, name) // adds workload-access, between the two
	eventuallyCondition(g, k, v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "secret "+tenant+"/a-workload")
	g.Eventually(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).Spec.KubeConfig.SecretRef.Name).To(Equal("a-workload"))
	}, timeout, interval).Should(Succeed())
	for range 3 {
		requestReconcile(g, k)
		g.Consistently(func(g Gomega) {
			g.Expect(getHelmRelease(g, k).Spec.KubeConfig.SecretRef.Name).To(Equal("a-workload"))
			c := condition(getKro(g, k), v1alpha1.ConditionWorkloadClusterReady)
			g.Expect(c.Message).To(ContainSubstring("secret " + tenant + "/a-workload"))
		}, 500*time.Millisecond, 100*time.Millisecond).Should(Succeed())
	}
	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
}

// requestReconcile asks for a reconcile of the Kro (openmcp.cloud/operation=reconcile)
// and waits until the provider has run it and removed the annotation.
func requestReconcile(g Gomega, k *v1alpha1.Kro) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := getKro(g, k)
		if got.Annotations == nil {
			got.Annotations = map[string]string{}
		}
		got.Annotations[constants.OperationAnnotation] = constants.OperationAnnotationValueReconcile
		return onboarding.Client.Update(context.Background(), got)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(getKro(g, k).Annotations).NotTo(HaveKey(constants.OperationAnnotation))
	}, timeout, interval).Should(Succeed())
}

// TestWorkloadClusterSwitchCleansUpTheFirst: standalone, a kubeconfig secret for another
// workload cluster that comes first by name moves kro there: its namespace and credential
// on the first cluster are removed and its token revoked before kro is installed on the
// other; the deletion after leaves nothing on the second.
func TestWorkloadClusterSwitchCleansUpTheFirst(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	w := readyWorkloadKro(t, g, ns, "cp-switch")
	k := w.kro
	tenant := tenantNamespace(g, k)
	oldHR := getHelmRelease(g, k)
	second := startControlPlane(t, g, "workload-2", false)

	g.Expect(platform.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "a-workload", Namespace: tenant, Labels: map[string]string{v1alpha1.LabelWorkloadClusterKubeconfig: "true"}},
		Data:       map[string][]byte{owned.KubeconfigKey: second.Kubeconfig},
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		hr := getHelmRelease(g, k)
		g.Expect(hr.UID).NotTo(Equal(oldHR.UID), "a new HelmRelease, once the old one is gone")
		g.Expect(hr.Spec.KubeConfig.SecretRef.Name).To(Equal("a-workload"))
	}, timeout, interval).Should(Succeed())
	eventuallyEvent(g, k, "Normal/"+v1alpha1.ReasonMovingPlacement, tenant+"/workload-access", tenant+"/a-workload")

	t.Log("nothing of kro is left on the first workload cluster, and its token is revoked")
	err := bareControlPlane.Client.Get(ctx, client.ObjectKey{Namespace: w.namespace, Name: owned.KroCredentialSecretName}, &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "kro's credential on the first workload cluster: %v", err)
	finalizeNamespace(g, bareControlPlane.Client, w.namespace)
	g.Eventually(func() bool {
		_, err := credentialtest.WhoAmI(ctx, tokenConfig(w.token))
		return apierrors.IsUnauthorized(err)
	}, credentialtest.RevocationTimeout, interval).Should(BeTrue(), "the first cluster's token is revoked")

	t.Log("kro runs on the second workload cluster")
	g.Eventually(func(g Gomega) { credentialtest.Get(g, second.Client, w.namespace) }, timeout, interval).Should(Succeed())
	playWorkloadKro(g, second.Client, w.namespace)
	fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm install succeeded")
	eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
	eventuallyCondition(g, k, v1alpha1.ConditionWorkloadClusterReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "secret "+tenant+"/a-workload")

	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
	err = second.Client.Get(ctx, client.ObjectKey{Namespace: w.namespace, Name: owned.KroCredentialSecretName}, &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "kro's credential on the second workload cluster: %v", err)
	g.Expect(apierrors.IsNotFound(controlPlane.Client.Get(ctx, owned.KroServiceAccount, &corev1.ServiceAccount{}))).To(BeTrue())
}

// TestDeletionReachesTheWorkloadClusterKroRunsOn: a Kro whose reconciles stop before the
// switch (its new version's pull secret is missing) while another workload cluster comes
// first is deleted: kro's credential and namespace go from the cluster kro runs on, not
// only from the chosen one, and its token is revoked.
func TestDeletionReachesTheWorkloadClusterKroRunsOn(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	w := readyWorkloadKro(t, g, ns, "cp-switch-del")
	k := w.kro
	tenant := tenantNamespace(g, k)
	missing := uniq("missing-pull")
	stuck := w.version
	stuck.Version, stuck.ChartPullSecret = uniq("wl-stuck"), missing
	offerVersion(g, stuck)
	switchVersion(g, k, stuck.Version)
	eventuallyCondition(g, k, v1alpha1.ConditionPullSecretsReady, metav1.ConditionFalse, v1alpha1.ReasonPullSecretMissing, missing)

	second := startControlPlane(t, g, "workload-3", false)
	g.Expect(platform.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "a-workload", Namespace: tenant, Labels: map[string]string{v1alpha1.LabelWorkloadClusterKubeconfig: "true"}},
		Data:       map[string][]byte{owned.KubeconfigKey: second.Kubeconfig},
	})).To(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).Spec.KubeConfig.SecretRef.Name).To(Equal("workload-access"))
	}, time.Second, 200*time.Millisecond).Should(Succeed())

	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
	w.expectWorkloadSideGone(g)
}
