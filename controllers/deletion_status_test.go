package controllers

import (
	"context"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	commonapi "github.com/openmcp-project/openmcp-operator/api/common"
	"github.com/openmcp-project/openmcp-operator/api/constants"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// unreachableKubeconfig is a well-formed kubeconfig of a ControlPlane that does not answer
// (a destroyed one): nothing listens on port 1.
func unreachableKubeconfig(g Gomega) []byte {
	cfg, err := clientcmd.Load(controlPlane.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	for _, c := range cfg.Clusters {
		c.Server = "https://127.0.0.1:1"
	}
	out, err := clientcmd.Write(*cfg)
	g.Expect(err).NotTo(HaveOccurred())
	return out
}

// TestDeletionWhenNothingWasInstalled: a Kro whose ControlPlane never answered has no
// HelmRelease, so nothing to guard: its deletion does not wait for the ControlPlane and
// removes what the provider made.
func TestDeletionWhenNothingWasInstalled(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	version, chartSecret := uniq("v1"), uniq("chart")
	sourceSecret(g, chartSecret, corev1.SecretTypeDockerConfigJson, "a")
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.3", ChartPullSecret: chartSecret})

	k := newKro(g, ns, "never-answered", version)
	tenant := tenantNamespace(g, k)
	g.Expect(client.IgnoreAlreadyExists(platform.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}))).To(Succeed())
	g.Expect(platform.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "controlplane-access", Namespace: tenant, Labels: map[string]string{v1alpha1.LabelControlPlaneKubeconfig: "true"}},
		Data:       map[string][]byte{owned.KubeconfigKey: unreachableKubeconfig(g)},
	})).To(Succeed())
	eventuallyCondition(g, k, v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionFalse, v1alpha1.ReasonControlPlaneUnreachable, "does not answer")
	chartCopy := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: providerName + "-" + chartSecret}}
	g.Expect(platform.Client.Get(ctx, client.ObjectKeyFromObject(chartCopy), chartCopy)).To(Succeed())
	g.Expect(platform.Client.Get(ctx, fluxKey(g, k), &sourcev1.OCIRepository{})).NotTo(Succeed(), "no OCIRepository without a ControlPlane")
	g.Expect(platform.Client.Get(ctx, fluxKey(g, k), &helmv2.HelmRelease{})).NotTo(Succeed(), "no HelmRelease without a ControlPlane")

	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
	eventuallyGone(g, platform.Client, &sourcev1.OCIRepository{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: providerName}})
	eventuallyGone(g, platform.Client, chartCopy)
}

// TestOpenMCPDeletionWithoutAccess: under openmcp, a Kro whose AccessRequest is never
// granted, or is denied, deletes; a denied request is reported with its own reason, and
// counts as access gone for a release that exists.
func TestOpenMCPDeletionWithoutAccess(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env := startOpenMCP(t, g)
	g.Expect(env.onboarding.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "project-a"}})).To(Succeed())

	type kroOf struct {
		kro    *v1alpha1.Kro
		tenant string
		ar     *clustersv1alpha1.AccessRequest
	}
	create := func(name string) kroOf {
		k := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: "project-a", Name: name}, Spec: v1alpha1.KroSpec{Version: baseVersion}}
		g.Expect(env.onboarding.Client.Create(ctx, k)).To(Succeed())
		tenant, err := owned.TenantNamespace(k)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(client.IgnoreAlreadyExists(env.platform.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}))).To(Succeed())
		want, err := clusters.NewAccessRequest(providerName, client.ObjectKeyFromObject(k))
		g.Expect(err).NotTo(HaveOccurred())
		ar := &clustersv1alpha1.AccessRequest{}
		g.Eventually(func() error { return env.platform.Client.Get(ctx, client.ObjectKeyFromObject(want), ar) }, timeout, interval).Should(Succeed())
		return kroOf{k, tenant, ar}
	}
	setPhase := func(x kroOf, phase string, secret string) {
		g.Eventually(func(g Gomega) {
			g.Expect(env.platform.Client.Get(ctx, client.ObjectKeyFromObject(x.ar), x.ar)).To(Succeed())
			x.ar.Status.Phase = phase
			x.ar.Status.SecretRef = nil
			if secret != "" {
				x.ar.Status.SecretRef = &commonapi.LocalObjectReference{Name: secret}
			}
			g.Expect(env.platform.Client.Status().Update(ctx, x.ar)).To(Succeed())
		}, timeout, interval).Should(Succeed())
	}
	condOf := func(x kroOf, typ string, status metav1.ConditionStatus, reason string, parts ...string) {
		g.Eventually(func(g Gomega) {
			got := &v1alpha1.Kro{}
			g.Expect(env.onboarding.Client.Get(ctx, client.ObjectKeyFromObject(x.kro), got)).To(Succeed())
			c := condition(got, typ)
			g.Expect(c).NotTo(BeNil(), "condition %s in %v", typ, got.Status.Conditions)
			g.Expect(c.Status).To(Equal(status), c.Message)
			g.Expect(c.Reason).To(Equal(reason), c.Message)
			for _, p := range parts {
				g.Expect(c.Message).To(ContainSubstring(p))
			}
		}, timeout, interval).Should(Succeed())
	}
	deleted := func(x kroOf) {
		eventuallyGone(g, env.onboarding.Client, x.kro)
		eventuallyGone(g, env.platform.Client, x.ar)
		eventuallyGone(g, env.platform.Client, &sourcev1.OCIRepository{ObjectMeta: metav1.ObjectMeta{Namespace: x.tenant, Name: providerName}})
	}

	pending := create("pending")
	denied := create("denied")
	revoked := create("revoked")

	// Denied from the start: reported as such, a Warning, and Ready says it too.
	setPhase(denied, clustersv1alpha1.REQUEST_DENIED, "")
	condOf(denied, v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionFalse, v1alpha1.ReasonAccessDenied, "openmcp denied AccessRequest "+denied.tenant+"/"+denied.ar.Name)
	condOf(denied, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonAccessDenied)
	g.Eventually(func(g Gomega) {
		list := &corev1.EventList{}
		g.Expect(env.onboarding.Client.List(ctx, list, client.InNamespace("project-a"))).To(Succeed())
		var reasons []string
		for _, e := range list.Items {
			if e.InvolvedObject.Name == denied.kro.Name {
				reasons = append(reasons, e.Type+"/"+e.Reason)
			}
		}
		g.Expect(reasons).To(ContainElement(corev1.EventTypeWarning + "/" + v1alpha1.ReasonAccessDenied))
	}, timeout, interval).Should(Succeed())

	// Granted, installed, then denied: the release is dropped without an uninstall.
	g.Expect(env.platform.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: revoked.tenant, Name: "revoked.kubeconfig"},
		Data:       map[string][]byte{owned.KubeconfigKey: env.controlPlane.Kubeconfig},
	})).To(Succeed())
	setPhase(revoked, clustersv1alpha1.REQUEST_GRANTED, "revoked.kubeconfig")
	hr := getHelmReleaseOn(g, env.platform, revoked.tenant)
	hr.Finalizers = append(hr.Finalizers, helmv2.HelmReleaseFinalizer)
	g.Expect(env.platform.Client.Update(ctx, hr)).To(Succeed())
	setPhase(revoked, clustersv1alpha1.REQUEST_DENIED, "")
	condOf(revoked, v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionFalse, v1alpha1.ReasonAccessDenied)

	condOf(pending, v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionFalse, v1alpha1.ReasonReconciling, "waiting for openmcp to grant")
	for _, x := range []kroOf{pending, denied, revoked} {
		g.Expect(env.onboarding.Client.Delete(ctx, x.kro)).To(Succeed())
	}
	deleted(pending)
	deleted(denied)

	g.Eventually(func(g Gomega) {
		hr := getHelmReleaseOn(g, env.platform, revoked.tenant)
		g.Expect(hr.Spec.Suspend).To(BeTrue())
		g.Expect(hr.DeletionTimestamp).NotTo(BeNil())
	}, timeout, interval).Should(Succeed())
	// Flux skips the uninstall of a suspended release and lets it go.
	hr = getHelmReleaseOn(g, env.platform, revoked.tenant)
	hr.Finalizers = nil
	g.Expect(env.platform.Client.Update(ctx, hr)).To(Succeed())
	deleted(revoked)
}

// TestConsumingReconcileKeepsAFreshIgnore: the reconcile that consumes
// openmcp.cloud/operation=reconcile read the Kro before someone set ignore; its removal
// must not take the newer ignore with it.
func TestConsumingReconcileKeepsAFreshIgnore(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	k := &v1alpha1.Kro{
		ObjectMeta: metav1.ObjectMeta{Name: "race", Namespace: ns, Annotations: map[string]string{
			constants.OperationAnnotation: constants.OperationAnnotationValueReconcile, "keep": "me"}},
		Spec: v1alpha1.KroSpec{Version: baseVersion},
	}
	// The reconcile's view: still reconcile. The server's: ignore, set since.
	stale := k.DeepCopy()
	k.Annotations[constants.OperationAnnotation] = constants.OperationAnnotationValueIgnore
	g.Expect(onboarding.Client.Create(ctx, k)).To(Succeed())
	stale.ResourceVersion, stale.UID = k.ResourceVersion, k.UID

	r := &KroReconciler{Onboarding: onboarding.Client}
	g.Expect(r.consumeReconcileOperation(ctx, stale, &step.WriteTracker{})).To(Succeed())
	got := getKro(g, k)
	g.Expect(got.Annotations).To(HaveKeyWithValue(constants.OperationAnnotation, constants.OperationAnnotationValueIgnore))
	g.Expect(got.Annotations).To(HaveKeyWithValue("keep", "me"))

	// Removed on the server in the meantime: nothing to do, no error.
	delete(got.Annotations, constants.OperationAnnotation)
	g.Expect(onboarding.Client.Update(ctx, got)).To(Succeed())
	g.Expect(r.consumeReconcileOperation(ctx, stale, &step.WriteTracker{})).To(Succeed())
	g.Expect(getKro(g, k).Annotations).To(Equal(map[string]string{"keep": "me"}))
}

// TestIgnoredDeletionIsReported: ignore pauses a deletion, and the Kro says so once, in
// its conditions and a Warning event that name the annotation.
func TestIgnoredDeletionIsReported(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	k := readyKro(t, g, ns, "frozen", baseVersion)
	k.Annotations = map[string]string{constants.OperationAnnotation: constants.OperationAnnotationValueIgnore}
	g.Expect(onboarding.Client.Update(ctx, k)).To(Succeed())
	deleteKro(g, k)

	annotation := constants.OperationAnnotation + "=" + constants.OperationAnnotationValueIgnore
	k = eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonOperationIgnored, "deletion is paused", annotation, "remove the annotation")
	g.Expect(k.Status.Phase).To(Equal(v1alpha1.PhaseTerminating))
	g.Expect(condition(k, v1alpha1.ConditionDeletionBlocked).Status).To(Equal(metav1.ConditionTrue))
	g.Expect(condition(k, v1alpha1.ConditionDeletionBlocked).Reason).To(Equal(v1alpha1.ReasonOperationIgnored))
	eventuallyEvent(g, k, "Warning/"+v1alpha1.ReasonOperationIgnored, annotation)
	// Still frozen, and that one status write is all.
	g.Consistently(func(g Gomega) {
		got := getKro(g, k)
		g.Expect(got.ResourceVersion).To(Equal(k.ResourceVersion))
		g.Expect(got.Finalizers).To(ContainElement(v1alpha1.Finalizer))
		g.Expect(getHelmRelease(g, k).DeletionTimestamp).To(BeNil())
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())

	k.Annotations = nil
	g.Expect(onboarding.Client.Update(ctx, k)).To(Succeed())
	eventuallyGone(g, onboarding.Client, k)
}

// TestUpgradeReportedOnceInstalled: a version change changes the OCIRepository only; the
// HelmRelease stays Ready with the old release until helm-controller has upgraded. The
// Kro must not claim the new version before.
func TestUpgradeReportedOnceInstalled(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	v1, v2 := uniq("v1"), uniq("v2")
	offerVersion(g, v1alpha1.KroVersion{Version: v1, ChartVersion: "0.9.3"})
	offerVersion(g, v1alpha1.KroVersion{Version: v2, ChartVersion: "0.9.4"})
	k := readyKro(t, g, ns, "upgrade", v1)
	g.Expect(k.Status.ChartVersion).To(Equal("0.9.3"))
	hrBefore := getHelmRelease(g, k)

	k.Spec.Version = v2
	g.Expect(onboarding.Client.Update(ctx, k)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(getOCIRepository(g, k).Spec.Reference.Tag).To(Equal("0.9.4"))
	}, timeout, interval).Should(Succeed())
	fluxReady(g, getOCIRepository(g, k), metav1.ConditionTrue, "stored artifact for 0.9.4")
	// The HelmRelease did not change: still Ready, with 0.9.3 deployed.
	hr := getHelmRelease(g, k)
	g.Expect(hr.Generation).To(Equal(hrBefore.Generation))
	g.Expect(hr.Status.History.Latest().ChartVersion).To(HavePrefix("0.9.3+"))

	k = eventuallyCondition(g, k, v1alpha1.ConditionHelmReleaseReady, metav1.ConditionFalse, v1alpha1.ReasonUpgradeInProgress, "upgrading kro from 0.9.3 to 0.9.4")
	eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonUpgradeInProgress, "upgrading kro from 0.9.3 to 0.9.4")
	g.Consistently(func(g Gomega) {
		got := getKro(g, k)
		ready := condition(got, v1alpha1.ConditionReady)
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(v1alpha1.ReasonUpgradeInProgress))
		g.Expect(ready.Message).To(ContainSubstring("upgrading kro from 0.9.3 to 0.9.4"))
		g.Expect(got.Status.Phase).To(Equal(v1alpha1.PhaseProgressing))
		g.Expect(got.Status.ChartVersion).To(Equal("0.9.3"))
	}, time.Second, 200*time.Millisecond).Should(Succeed())
	eventuallyEvent(g, k, "Normal/"+v1alpha1.ReasonUpgradeInProgress, "upgrading kro from 0.9.3 to 0.9.4")

	// A failed upgrade (rolled back) says which version still runs.
	fluxReady(g, hr, metav1.ConditionFalse, "upgrade retries exhausted")
	k = eventuallyCondition(g, k, v1alpha1.ConditionHelmReleaseReady, metav1.ConditionFalse, v1alpha1.ReasonReleaseFailed,
		"upgrading kro from 0.9.3 to 0.9.4 failed", "upgrade retries exhausted", "kro 0.9.3 still runs")
	g.Expect(k.Status.ChartVersion).To(Equal("0.9.3"))

	// helm-controller upgrades: now, and only now, 0.9.4 is installed.
	fluxReady(g, hr, metav1.ConditionTrue, "Helm upgrade succeeded")
	k = eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "kro (chart 0.9.4)")
	g.Expect(k.Status.ChartVersion).To(Equal("0.9.4"))
	g.Expect(k.Status.Phase).To(Equal(v1alpha1.PhaseReady))

	// Back to 0.9.3 is a downgrade, reported as such.
	k.Spec.Version = v1
	g.Expect(onboarding.Client.Update(ctx, k)).To(Succeed())
	eventuallyCondition(g, k, v1alpha1.ConditionHelmReleaseReady, metav1.ConditionFalse, v1alpha1.ReasonUpgradeInProgress, "downgrading kro from 0.9.4 to 0.9.3")
}

func TestChartVersionsAsHelmControllerWritesThem(t *testing.T) {
	g := NewWithT(t)
	// helm-controller appends the OCI digest as build metadata, replacing the tag's own.
	g.Expect(flux.SameChart("0.9.4+1c7c5a1b0f4b", "0.9.4")).To(BeTrue())
	g.Expect(flux.SameChart("0.9.4+1c7c5a1b0f4b", "0.9.4_rebuilt")).To(BeTrue())
	g.Expect(flux.SameChart("0.9.4-rc.1+1c7c5a1b0f4b", "0.9.4-rc.1")).To(BeTrue())
	g.Expect(flux.SameChart("0.9.3+1c7c5a1b0f4b", "0.9.4")).To(BeFalse())
	g.Expect(flux.SameChart("0.9.4-rc.1+1c7c5a1b0f4b", "0.9.4")).To(BeFalse())
	g.Expect(flux.ChartCore("v0.9.3+1c7c5a1b0f4b")).To(Equal("0.9.3"))
	g.Expect(flux.ChangeVerb("0.9.3+abc", "0.9.4")).To(Equal("upgrading"))
	g.Expect(flux.ChangeVerb("0.10.0+abc", "0.9.4")).To(Equal("downgrading"))
	g.Expect(flux.ChangeVerb("latest", "0.9.4")).To(Equal("upgrading"))

	hr := &helmv2.HelmRelease{}
	g.Expect(flux.InstalledChart(hr)).To(BeEmpty())
	hr.Status.History = helmv2.Snapshots{
		{Status: "failed", ChartVersion: "0.9.4+aaaaaaaaaaaa"},
		{Status: "deployed", ChartVersion: "0.9.3+bbbbbbbbbbbb"},
		{Status: "superseded", ChartVersion: "0.9.2+cccccccccccc"},
	}
	g.Expect(flux.InstalledChart(hr)).To(Equal("0.9.3+bbbbbbbbbbbb"))
}
