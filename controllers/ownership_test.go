package controllers

import (
	"context"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// TestTenantSecretsAreNeverTakenOver: a secret someone else made under the name of a pull
// secret copy, in kro-system on the ControlPlane or in the tenant namespace, is neither
// overwritten nor deleted: the Kro reports the conflict, names the secret and what to
// do, and its deletion leaves the secret as it was.
func TestTenantSecretsAreNeverTakenOver(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	version, chart, image := uniq("v1"), uniq("chart"), uniq("image")
	sourceSecret(g, chart, corev1.SecretTypeDockerConfigJson, "provider-chart")
	sourceSecret(g, image, corev1.SecretTypeDockerConfigJson, "provider-image")
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.3", ChartPullSecret: chart, HelmValues: helmValues(image)})

	tenantSecret := func(c client.Client, namespace, name string) *corev1.Secret {
		g.Expect(client.IgnoreAlreadyExists(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}))).To(Succeed())
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"owner": "tenant"}},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"tenant.example.com":{"auth":"the-tenants-own"}}}`)},
		}
		g.Expect(c.Create(ctx, s)).To(Succeed())
		return s
	}
	untouched := func(g Gomega, c client.Client, s *corev1.Secret) {
		got := &corev1.Secret{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
		g.Expect(got.UID).To(Equal(s.UID))
		g.Expect(got.Data).To(Equal(s.Data))
		g.Expect(got.Type).To(Equal(corev1.SecretTypeDockerConfigJson))
		g.Expect(got.Labels).To(Equal(s.Labels))
	}

	// On the ControlPlane: the tenant's secret in kro-system has the image pull secret's name.
	onCP := tenantSecret(controlPlane.Client, owned.KroNamespace, image)
	k := newKro(g, ns, "cp-conflict", version)
	grantAccess(g, k, controlPlane)
	k = eventuallyCondition(g, k, v1alpha1.ConditionPullSecretsReady, metav1.ConditionFalse, v1alpha1.ReasonOwnershipConflict,
		"secret "+owned.KroNamespace+"/"+image+" on the ControlPlane was not created by the provider", "rename the image pull secret", "or delete that secret")
	g.Expect(condition(k, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonOwnershipConflict))
	g.Expect(condition(k, v1alpha1.ConditionPullSecretsReady).Message).NotTo(ContainSubstring("provider-image"), "no secret content in messages")
	eventuallyEvent(g, k, "Warning/"+v1alpha1.ReasonOwnershipConflict, owned.KroNamespace+"/"+image)
	untouched(g, controlPlane.Client, onCP)

	// On the platform: the tenant namespace holds a secret named like the chart pull secret copy.
	k2 := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "platform-conflict"}}
	onPlatform := tenantSecret(platform.Client, tenantNamespace(g, k2), providerName+"-"+chart)
	k2 = newKro(g, ns, k2.Name, version)
	eventuallyCondition(g, k2, v1alpha1.ConditionPullSecretsReady, metav1.ConditionFalse, v1alpha1.ReasonOwnershipConflict,
		"secret "+onPlatform.Namespace+"/"+onPlatform.Name+" on the platform cluster was not created by the provider", "chartPullSecret of version "+version)
	eventuallyEvent(g, k2, "Warning/"+v1alpha1.ReasonOwnershipConflict, onPlatform.Name)
	untouched(g, platform.Client, onPlatform)

	// Deleting the Kros deletes neither.
	deleteKro(g, k)
	deleteKro(g, k2)
	eventuallyGone(g, onboarding.Client, k)
	eventuallyGone(g, onboarding.Client, k2)
	g.Consistently(func(g Gomega) {
		untouched(g, controlPlane.Client, onCP)
		untouched(g, platform.Client, onPlatform)
	}, time.Second, 200*time.Millisecond).Should(Succeed())
}

// TestTenantNamespaceRemovedWhenTheProviderCreatedIt: the last step of a deletion deletes
// the tenant namespace the provider created, once it holds only what Kubernetes puts into
// every namespace; a namespace someone else created stays, and so does one the provider
// created that still holds someone's object.
func TestTenantNamespaceRemovedWhenTheProviderCreatedIt(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	version, chart := uniq("v1"), uniq("chart")
	sourceSecret(g, chart, corev1.SecretTypeDockerConfigJson, "a")
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.3", ChartPullSecret: chart})

	// kubernetesDefaults adds what kube-controller-manager puts into every namespace (the
	// test clusters run none).
	kubernetesDefaults := func(namespace string) {
		g.Expect(platform.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "kube-root-ca.crt"}})).To(Succeed())
		g.Expect(platform.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "default"}})).To(Succeed())
	}
	// chartCopyIn waits for what the provider puts into the Kro's tenant namespace while
	// the ControlPlane cannot be reached yet: the chart pull secret copy.
	chartCopyIn := func(g Gomega, k *v1alpha1.Kro) {
		g.Expect(platform.Client.Get(ctx, client.ObjectKey{Namespace: tenantNamespace(g, k), Name: providerName + "-" + chart}, &corev1.Secret{})).To(Succeed())
	}
	// createdByProvider waits until the provider has made the Kro's tenant namespace and
	// what goes into it while the ControlPlane cannot be reached yet.
	createdByProvider := func(name string) (*v1alpha1.Kro, *corev1.Namespace) {
		k := newKro(g, ns, name, version)
		tenant := &corev1.Namespace{}
		g.Eventually(func(g Gomega) {
			g.Expect(platform.Client.Get(ctx, client.ObjectKey{Name: tenantNamespace(g, k)}, tenant)).To(Succeed())
			g.Expect(tenant.Labels).To(HaveKeyWithValue(v1alpha1.LabelManagedBy, v1alpha1.ManagedByValue))
			chartCopyIn(g, k)
		}, timeout, interval).Should(Succeed())
		kubernetesDefaults(tenant.Name)
		return k, tenant
	}
	deleted := func(g Gomega, n *corev1.Namespace) bool {
		got := &corev1.Namespace{}
		err := platform.Client.Get(ctx, client.ObjectKeyFromObject(n), got)
		if client.IgnoreNotFound(err) != nil {
			g.Expect(err).NotTo(HaveOccurred())
		}
		// Without kube-controller-manager a deleted namespace stays Terminating.
		return err != nil || !got.DeletionTimestamp.IsZero()
	}

	// Created by the provider, empty: deleted with the Kro.
	ours, oursNS := createdByProvider("provider-made")
	// Created by the provider, but someone put a ConfigMap into it: kept.
	used, usedNS := createdByProvider("provider-made-used")
	g.Expect(platform.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: usedNS.Name, Name: "notes"}})).To(Succeed())
	// Created by someone else (openmcp, an operator): kept.
	theirs := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "operator-made"}}
	theirsNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNamespace(g, theirs)}}
	g.Expect(platform.Client.Create(ctx, theirsNS)).To(Succeed())
	kubernetesDefaults(theirsNS.Name)
	theirs = newKro(g, ns, theirs.Name, version)
	g.Eventually(func(g Gomega) { chartCopyIn(g, theirs) }, timeout, interval).Should(Succeed())

	for _, k := range []*v1alpha1.Kro{ours, used, theirs} {
		deleteKro(g, k)
	}
	for _, k := range []*v1alpha1.Kro{ours, used, theirs} {
		eventuallyGone(g, onboarding.Client, k)
	}
	g.Eventually(func(g Gomega) bool { return deleted(g, oursNS) }, timeout, interval).Should(BeTrue(), "the namespace the provider created is deleted")
	g.Consistently(func(g Gomega) {
		g.Expect(deleted(g, usedNS)).To(BeFalse(), "a namespace that holds someone's object stays")
		g.Expect(deleted(g, theirsNS)).To(BeFalse(), "a namespace the provider did not create stays")
	}, time.Second, 200*time.Millisecond).Should(Succeed())
	eventuallyEvent(g, used, "Normal/"+v1alpha1.ReasonTerminating, usedNS.Name, "is kept because it is not empty", "ConfigMap/notes")
}

// TestRGDCreatedDuringUninstallIsNamedAsOrphaned: once the HelmRelease is being deleted,
// Flux uninstalls kro whatever happens; an RGD created then does not turn DeletionBlocked
// back to True, the condition says it will be orphaned.
func TestRGDCreatedDuringUninstallIsNamedAsOrphaned(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	k := readyKro(t, g, ns, "late-rgd", baseVersion)
	hr := getHelmRelease(g, k)
	hr.Finalizers = append(hr.Finalizers, helmv2.HelmReleaseFinalizer)
	g.Expect(platform.Client.Update(ctx, hr)).To(Succeed())

	deleteKro(g, k)
	g.Eventually(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).DeletionTimestamp).NotTo(BeNil())
	}, timeout, interval).Should(Succeed())
	eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionFalse, v1alpha1.ReasonUninstalling, "uninstall of kro from the ControlPlane is under way")

	rgd := newRGD(g, controlPlane.Client, uniq("late"))
	t.Cleanup(func() { _ = controlPlane.Client.Delete(context.Background(), rgd) })
	k = eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionFalse, v1alpha1.ReasonUninstalling,
		"1 ResourceGraphDefinitions created since it began will be orphaned", rgd.GetName())
	g.Consistently(func(g Gomega) {
		g.Expect(condition(getKro(g, k), v1alpha1.ConditionDeletionBlocked).Status).To(Equal(metav1.ConditionFalse))
	}, time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(kroEvents(g, k)).NotTo(ContainElement(ContainSubstring("Warning/" + v1alpha1.ReasonUserResourcesPresent)))

	hr = getHelmRelease(g, k)
	hr.Finalizers = nil
	g.Expect(platform.Client.Update(ctx, hr)).To(Succeed())
	eventuallyGone(g, onboarding.Client, k)
}

// TestDeletionWaitsWhileTheRGDWatchIsNotSynced: kro's CRD exists on the ControlPlane but
// the provider's RGD watch has not synced (here because the CRD cannot become
// established: another CRD of the group holds its kind). That counts as unknown: the
// deletion waits and says why, rather than taking "no RGDs in the cache" for none.
func TestDeletionWaitsWhileTheRGDWatchIsNotSynced(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	cp := startControlPlane(t, g, "unsynced", false)
	ns := newNamespace(t, g)
	k := readyKroOn(t, g, cp, ns, "unsynced", baseVersion)
	eventuallyCondition(g, k, v1alpha1.ConditionResourceGraphDefinitionsReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "0 ResourceGraphDefinitions")

	crd := func(plural string) *apiextensionsv1.CustomResourceDefinition {
		return &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: plural + ".kro.run"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "kro.run",
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: "ResourceGraphDefinition", ListKind: "ResourceGraphDefinitionList"},
				Scope: apiextensionsv1.ClusterScoped,
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
					Name: "v1alpha1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", XPreserveUnknownFields: ptr.To(true),
					}},
				}},
			},
		}
	}
	blocker := crd("blockers")
	g.Expect(cp.Client.Create(ctx, blocker)).To(Succeed())
	g.Expect(testenv.WaitForCRD(ctx, cp.Client, blocker.Name, interval)).To(Succeed())
	kroCRD := crd("resourcegraphdefinitions")
	g.Expect(cp.Client.Create(ctx, kroCRD)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(kroCRD), kroCRD)).To(Succeed())
		var accepted *apiextensionsv1.CustomResourceDefinitionCondition
		for i := range kroCRD.Status.Conditions {
			if kroCRD.Status.Conditions[i].Type == apiextensionsv1.NamesAccepted {
				accepted = &kroCRD.Status.Conditions[i]
			}
		}
		g.Expect(accepted).NotTo(BeNil())
		g.Expect(accepted.Status).To(Equal(apiextensionsv1.ConditionFalse))
	}, timeout, interval).Should(Succeed())

	hr := getHelmRelease(g, k)
	hr.Finalizers = append(hr.Finalizers, helmv2.HelmReleaseFinalizer)
	g.Expect(platform.Client.Update(ctx, hr)).To(Succeed())
	deleteKro(g, k)
	eventuallyCondition(g, k, v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, v1alpha1.ReasonReconciling,
		"cannot check the ControlPlane for ResourceGraphDefinitions yet", "has not synced yet")
	g.Consistently(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).DeletionTimestamp).To(BeNil())
	}, time.Second, 200*time.Millisecond).Should(Succeed())

	// The CRD becomes established, the watch syncs and reports no RGDs: the uninstall goes ahead.
	g.Expect(cp.Client.Delete(ctx, blocker)).To(Succeed())
	g.Expect(testenv.WaitForCRD(ctx, cp.Client, kroCRD.Name, interval)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(getHelmRelease(g, k).DeletionTimestamp).NotTo(BeNil())
	}, timeout, interval).Should(Succeed())
	hr = getHelmRelease(g, k)
	hr.Finalizers = nil
	g.Expect(platform.Client.Update(ctx, hr)).To(Succeed())
	eventuallyGone(g, onboarding.Client, k)
}

// TestFluxObjectsOfOthersAreNeverTakenOver: a HelmRelease of the provider's name in the
// tenant namespace that someone else made is reported and left alone, also by the Kro's
// deletion, which then has nothing of its own to uninstall.
func TestFluxObjectsOfOthersAreNeverTakenOver(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	ns := newNamespace(t, g)
	k := newKro(g, ns, "flux-conflict", baseVersion)
	tenant := tenantNamespace(g, k)
	g.Expect(client.IgnoreAlreadyExists(platform.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}))).To(Succeed())
	theirs := &helmv2.HelmRelease{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: providerName, Labels: map[string]string{"owner": "platform-team"}},
		Spec: helmv2.HelmReleaseSpec{
			ChartRef: &helmv2.CrossNamespaceSourceReference{Kind: "OCIRepository", Name: "theirs"},
		},
	}
	g.Expect(platform.Client.Create(ctx, theirs)).To(Succeed())
	grantAccess(g, k, controlPlane)
	k = eventuallyCondition(g, k, v1alpha1.ConditionHelmReleaseReady, metav1.ConditionFalse, v1alpha1.ReasonOwnershipConflict,
		"HelmRelease "+tenant+"/"+providerName+" on the platform cluster was not created by the provider", "move that object elsewhere")
	eventuallyEvent(g, k, "Warning/"+v1alpha1.ReasonOwnershipConflict, "HelmRelease "+tenant+"/"+providerName)
	untouched := func(g Gomega) {
		got := &helmv2.HelmRelease{}
		g.Expect(platform.Client.Get(ctx, client.ObjectKeyFromObject(theirs), got)).To(Succeed())
		g.Expect(got.UID).To(Equal(theirs.UID))
		g.Expect(got.Labels).To(Equal(theirs.Labels))
		g.Expect(got.Spec.ChartRef.Name).To(Equal("theirs"))
		g.Expect(got.DeletionTimestamp).To(BeNil())
	}
	untouched(g)

	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
	untouched(g)
	g.Expect(platform.Client.Delete(ctx, theirs)).To(Succeed())
}
