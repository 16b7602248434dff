package controllers

import (
	"context"
	"slices"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/handover"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// playFluxFinalizer stands for helm-controller's finalizer, which the tests remove
// themselves where helm-controller would once it has uninstalled (or let go of) a release.
const playFluxFinalizer = "finalizers.fluxcd.io"

// earlierFor builds the earlier provider's installation for a Kro that is about to be
// created, on the suite's ControlPlane, with the chart and image pull secrets of src.
func earlierFor(g Gomega, namespace, name string, chart, image *corev1.Secret) testenv.EarlierInstallation {
	k := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	e := testenv.EarlierInstallation{
		KroName: name, TenantNamespace: tenantNamespace(g, k),
		ChartURL: v1alpha1.DefaultChartURL, ChartVersion: "0.9.3",
		ChartPullSecret: chart, ImagePullSecrets: []*corev1.Secret{image},
		Values:     helmValues(image.Name),
		Kubeconfig: controlPlane.Kubeconfig,
	}
	g.Expect(e.Create(context.Background(), platform.Client, controlPlane.Client, namespace, true)).To(Succeed())
	hr := e.HelmRelease()
	g.Expect(platform.Client.Get(context.Background(), client.ObjectKeyFromObject(hr), hr)).To(Succeed())
	controllerutil.AddFinalizer(hr, playFluxFinalizer)
	g.Expect(platform.Client.Update(context.Background(), hr)).To(Succeed())
	fluxReady(g, hr, metav1.ConditionTrue, "Helm install succeeded")
	return e
}

// kroWithFinalizer creates a Kro as the earlier provider leaves it: with the finalizer,
// which has the same string.
func kroWithFinalizer(g Gomega, namespace, name, version string) *v1alpha1.Kro {
	k := &v1alpha1.Kro{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Finalizers: []string{v1alpha1.Finalizer}},
		Spec:       v1alpha1.KroSpec{Version: version},
	}
	g.Expect(onboarding.Client.Create(context.Background(), k)).To(Succeed())
	return k
}

// letGo removes the stand-in for helm-controller's finalizer, as helm-controller does once
// it has uninstalled (or, suspended, let go of) a release.
func letGo(g Gomega, hr *helmv2.HelmRelease) {
	controllerutil.RemoveFinalizer(hr, playFluxFinalizer)
	g.Expect(platform.Client.Update(context.Background(), hr)).To(Succeed())
}

func earlierRelease(e testenv.EarlierInstallation) (*helmv2.HelmRelease, error) {
	hr := e.HelmRelease()
	err := platform.Client.Get(context.Background(), client.ObjectKeyFromObject(hr), hr)
	return hr, err
}

// TestHandOverFromEarlierProvider: a Kro that the earlier provider installed is taken
// over without an uninstall: its HelmRelease is suspended before the provider's exists,
// its image pull secret copy is adopted (same UID), and only once the provider's
// HelmRelease is Ready are its HelmRelease, OCIRepository, AccessRequest, access secret
// and chart pull secret copy removed. The condition HandOver says so meanwhile, an event
// when it is done.
func TestHandOverFromEarlierProvider(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	chart := sourceSecret(g, uniq("ho-chart"), corev1.SecretTypeDockerConfigJson, "chart")
	image := sourceSecret(g, uniq("ho-image"), corev1.SecretTypeDockerConfigJson, "image")
	version := "v0.9.3-handover"
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.3", ChartPullSecret: chart.Name, HelmValues: helmValues(image.Name)})
	t.Cleanup(func() { withdrawVersion(NewWithT(t), version) })

	e := earlierFor(g, ns, "cp-ho", chart, image)
	earlierCopy := &corev1.Secret{}
	g.Expect(controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: owned.KroNamespace, Name: image.Name}, earlierCopy)).To(Succeed())
	k := kroWithFinalizer(g, ns, "cp-ho", version)
	grantAccess(g, k, controlPlane)

	// Never two HelmReleases driving the release: the provider's exists only beside a
	// suspended earlier one.
	g.Eventually(func(g Gomega) {
		own := getHelmRelease(g, k)
		old, err := earlierRelease(e)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(old.Spec.Suspend).To(BeTrue())
		g.Expect(own.Spec.ReleaseName).To(Equal(old.Spec.ReleaseName))
	}, timeout, interval).Should(Succeed())
	k = eventuallyCondition(g, k, v1alpha1.ConditionHandOver, metav1.ConditionTrue, v1alpha1.ReasonHandingOver, "stay until it is Ready")
	eventuallyEvent(g, k, "Normal/"+v1alpha1.ReasonHandingOver, "suspended the earlier provider's HelmRelease")
	eventuallyCondition(g, k, v1alpha1.ConditionEarlierReleaseSuspended, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "is suspended")

	// The earlier copy is the provider's now: labelled, the same object.
	g.Eventually(func(g Gomega) {
		cp := &corev1.Secret{}
		g.Expect(controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(earlierCopy), cp)).To(Succeed())
		g.Expect(cp.UID).To(Equal(earlierCopy.UID))
		g.Expect(cp.Labels).To(HaveKeyWithValue(v1alpha1.LabelManagedBy, v1alpha1.ManagedByValue))
	}, timeout, interval).Should(Succeed())
	g.Expect(condition(getKro(g, k), v1alpha1.ConditionPullSecretsReady).Reason).NotTo(Equal(v1alpha1.ReasonOwnershipConflict))

	// Nothing of the earlier installation goes while the provider's release is not Ready.
	g.Consistently(func(g Gomega) {
		_, err := earlierRelease(e)
		g.Expect(err).NotTo(HaveOccurred())
	}, time.Second, interval).Should(Succeed())

	fluxReady(g, getOCIRepository(g, k), metav1.ConditionTrue, "stored artifact")
	fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm upgrade succeeded")
	eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)

	// helm-controller lets a suspended release go without an uninstall.
	g.Eventually(func(g Gomega) {
		old, err := earlierRelease(e)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(old.DeletionTimestamp).NotTo(BeNil())
		g.Expect(old.Spec.Suspend).To(BeTrue())
	}, timeout, interval).Should(Succeed())
	old, _ := earlierRelease(e)
	letGo(g, old)

	for _, o := range []client.Object{e.HelmRelease(), e.OCIRepository(), e.AccessRequest(ns), e.AccessSecret(), e.ChartSecretCopy()} {
		eventuallyGone(g, platform.Client, o)
	}
	eventuallyEvent(g, k, "Normal/"+v1alpha1.ReasonHandOverComplete)
	g.Eventually(func(g Gomega) {
		g.Expect(condition(getKro(g, k), v1alpha1.ConditionHandOver)).To(BeNil())
	}, timeout, interval).Should(Succeed())
	g.Expect(condition(getKro(g, k), v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))

	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
	eventuallyGone(g, controlPlane.Client, earlierCopy)
}

// TestHandOverKeepsATenantsSecret: a secret in kro-system of an image pull secret's name
// whose data differs from the source is the tenant's: not adopted, not deleted, and
// reported as an ownership conflict.
func TestHandOverKeepsATenantsSecret(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	image := sourceSecret(g, uniq("ho-mine"), corev1.SecretTypeDockerConfigJson, "source")
	version := "v0.9.3-tenant-secret"
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.3", HelmValues: helmValues(image.Name)})
	t.Cleanup(func() { withdrawVersion(NewWithT(t), version) })
	mine := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: owned.KroNamespace, Name: image.Name},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)},
	}
	g.Expect(client.IgnoreAlreadyExists(controlPlane.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: owned.KroNamespace}}))).To(Succeed())
	g.Expect(controlPlane.Client.Create(ctx, mine)).To(Succeed())
	t.Cleanup(func() { _ = controlPlane.Client.Delete(ctx, mine) })

	k := newKro(g, ns, "cp-mine", version)
	grantAccess(g, k, controlPlane)
	eventuallyCondition(g, k, v1alpha1.ConditionPullSecretsReady, metav1.ConditionFalse, v1alpha1.ReasonOwnershipConflict, image.Name)
	got := &corev1.Secret{}
	g.Expect(controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(mine), got)).To(Succeed())
	g.Expect(got.Labels).NotTo(HaveKey(v1alpha1.LabelManagedBy))
	g.Expect(got.Data).To(Equal(mine.Data))

	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
	g.Expect(controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(mine), got)).To(Succeed())
}

// TestDeletionOfAnEarlierInstallation: a Kro already being deleted when the provider
// meets it has only the earlier provider's installation. That HelmRelease is kro's
// release: guarded like the provider's own, resumed if it was suspended, and deleted so
// that Flux uninstalls kro; then the rest of the earlier objects go, and nothing of the
// provider's is ever created.
func TestDeletionOfAnEarlierInstallation(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	chart := sourceSecret(g, uniq("hd-chart"), corev1.SecretTypeDockerConfigJson, "chart")
	image := sourceSecret(g, uniq("hd-image"), corev1.SecretTypeDockerConfigJson, "image")
	e := earlierFor(g, ns, "cp-hd", chart, image)
	// A hand-over that was cut short: suspended, the provider's release not made yet.
	old, err := earlierRelease(e)
	g.Expect(err).NotTo(HaveOccurred())
	old.Spec.Suspend = true
	g.Expect(platform.Client.Update(ctx, old)).To(Succeed())
	rgd := newRGD(g, controlPlane.Client, uniq("held"))

	k := kroWithFinalizer(g, ns, "cp-hd", "v0.0.0-withdrawn")
	grantAccess(g, k, controlPlane)
	deleteKro(g, k)
	eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonUserResourcesPresent, rgd.GetName())
	old, err = earlierRelease(e)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(old.DeletionTimestamp).To(BeNil())

	g.Expect(controlPlane.Client.Delete(ctx, rgd)).To(Succeed())
	g.Eventually(func(g Gomega) {
		old, err := earlierRelease(e)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(old.DeletionTimestamp).NotTo(BeNil())
		g.Expect(old.Spec.Suspend).To(BeFalse(), "Flux skips the uninstall of a suspended release")
	}, timeout, interval).Should(Succeed())
	eventuallyGone(g, controlPlane.Client, e.ImageSecretCopies()[0])
	old, _ = earlierRelease(e)
	letGo(g, old)

	eventuallyGone(g, onboarding.Client, k)
	for _, o := range []client.Object{e.HelmRelease(), e.OCIRepository(), e.AccessRequest(ns), e.AccessSecret(), e.ChartSecretCopy()} {
		eventuallyGone(g, platform.Client, o)
	}
	for _, o := range []client.Object{&helmv2.HelmRelease{}, &sourcev1.OCIRepository{}} {
		o.SetNamespace(e.TenantNamespace)
		o.SetName(providerName)
		g.Expect(apierrors.IsNotFound(platform.Client.Get(ctx, client.ObjectKeyFromObject(o), o))).To(BeTrue(), "%T of the provider was made", o)
	}
}

// TestStuckUninstallIsBlocked: when the ControlPlane stops answering after Flux began
// uninstalling (the HelmRelease is being deleted, its kubeconfig still there), the Kro
// does not say that nothing blocks the deletion: DeletionBlocked is True with Flux's
// error and the time the uninstall began.
func TestStuckUninstallIsBlocked(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	k := readyKro(t, g, ns, "cp-stuck", baseVersion)
	hr := getHelmRelease(g, k)
	controllerutil.AddFinalizer(hr, playFluxFinalizer)
	g.Expect(platform.Client.Update(ctx, hr)).To(Succeed())

	deleteKro(g, k)
	g.Eventually(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).DeletionTimestamp).NotTo(BeNil())
	}, timeout, interval).Should(Succeed())
	access := &corev1.Secret{}
	g.Expect(platform.Client.Get(ctx, client.ObjectKey{Namespace: tenantNamespace(g, k), Name: "controlplane-access"}, access)).To(Succeed())
	access.Data[owned.KubeconfigKey] = unreachableKubeconfig(g)
	g.Expect(platform.Client.Update(ctx, access)).To(Succeed())
	hr = getHelmRelease(g, k)
	meta.SetStatusCondition(&hr.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: helmv2.UninstallFailedReason, Message: "Kubernetes cluster unreachable: connection refused", ObservedGeneration: hr.Generation})
	g.Expect(platform.Client.Status().Update(ctx, hr)).To(Succeed())

	began := hr.DeletionTimestamp.UTC().Format(time.RFC3339)
	k = eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonUninstallStuck,
		"Flux began uninstalling kro at "+began, "does not answer", "Kubernetes cluster unreachable")
	g.Expect(condition(k, v1alpha1.ConditionDeletionBlocked).Message).NotTo(ContainSubstring("nothing blocks"))

	// The ControlPlane answers again and Flux finishes: the deletion goes on.
	g.Expect(platform.Client.Get(ctx, client.ObjectKeyFromObject(access), access)).To(Succeed())
	access.Data[owned.KubeconfigKey] = controlPlane.Kubeconfig
	g.Expect(platform.Client.Update(ctx, access)).To(Succeed())
	hr = getHelmRelease(g, k)
	letGo(g, hr)
	eventuallyGone(g, onboarding.Client, k)
}

// TestHandOverConditionIsOccasional: HandOver comes after the conditions that are always
// there, does not hold Ready back, and is gone from a status once a reconcile no longer
// reports it.
func TestHandOverConditionIsOccasional(t *testing.T) {
	g := NewWithT(t)
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var obs step.Observation
	obs.Set(v1alpha1.ConditionHandOver, metav1.ConditionTrue, v1alpha1.ReasonHandingOver, "taking over")
	for _, typ := range step.ConditionsOf(v1alpha1.PlacementControlPlane)[1:] {
		if typ != v1alpha1.ConditionDeletionBlocked {
			obs.Set(typ, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "fine")
		}
	}
	st := step.ComputeStatus(v1alpha1.KroStatus{}, 1, obs, now)
	g.Expect(st.Conditions[len(st.Conditions)-1].Type).To(Equal(v1alpha1.ConditionHandOver))
	g.Expect(step.FindCondition(st.Conditions, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	g.Expect(st.Phase).To(Equal(v1alpha1.PhaseReady))

	obs.Conditions = slices.DeleteFunc(obs.Conditions, func(c metav1.Condition) bool { return c.Type == v1alpha1.ConditionHandOver })
	g.Expect(step.FindCondition(step.ComputeStatus(st, 1, obs, now).Conditions, v1alpha1.ConditionHandOver)).To(BeNil())
}

// TestEarlierCacheHoldsOnlyTheEarlierObjects: the cache behind the hand-over selects the
// earlier provider's objects by name, so that it costs nothing per Kro once no earlier
// installation is left: the provider's own HelmReleases and OCIRepositories are not in it.
func TestEarlierCacheHoldsOnlyTheEarlierObjects(t *testing.T) {
	g := withClusters(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := newNamespace(t, g)
	readyKro(t, g, ns, "cp-cache", baseVersion)
	cl, err := cluster.New(platform.Config, func(o *cluster.Options) { o.Scheme = platform.Client.Scheme() })
	g.Expect(err).NotTo(HaveOccurred())
	c, err := handover.EarlierCache(cl)
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = c.Start(ctx) }()
	g.Expect(c.WaitForCacheSync(ctx)).To(BeTrue())
	var releases helmv2.HelmReleaseList
	g.Expect(c.List(ctx, &releases)).To(Succeed())
	var repos sourcev1.OCIRepositoryList
	g.Expect(c.List(ctx, &repos)).To(Succeed())
	all := &helmv2.HelmReleaseList{}
	g.Expect(platform.Client.List(ctx, all)).To(Succeed())
	g.Expect(all.Items).NotTo(BeEmpty(), "the suite's Kros have HelmReleases")
	for _, hr := range releases.Items {
		g.Expect(hr.Name).To(Equal(handover.EarlierHelmReleaseName))
	}
	for _, r := range repos.Items {
		g.Expect(r.Name).To(Equal(handover.EarlierOCIRepositoryName))
	}
}
