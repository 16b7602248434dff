//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// The hand-over specs of the fault suite: the earlier provider's installation of kro,
// built from the fixture in test/testenv (its objects exactly as v1.3.0 leaves them) and
// installed by the real helm-controller, is met by this provider. They run in the
// faults environment, on its ControlPlane a, with the provider stopped while the earlier
// installation is made: the earlier provider is gone, this one starts.

// openMCPAPIModule holds the AccessRequest CRD the earlier provider's request needs.
const openMCPAPIModule = "github.com/openmcp-project/openmcp-operator/api@v1.3.0"

// handOverState is what one look at a hand-over found.
type handOverState struct {
	// driving counts the HelmReleases of the Helm release kro that are not suspended.
	driving int
	// earlierRelease, earlierRepo, ownRelease: which of them exist.
	earlierRelease, earlierSuspended, earlierRepo, ownRelease bool
}

// kept is an object that must keep its UID throughout.
type kept struct {
	what string
	key  client.ObjectKey
	obj  func() client.Object
	uid  types.UID
	// tenant's: removed with the tenant's work.
	tenant bool
}

// stage is how far the hand-over has come: 0 nothing done, 1 the earlier release
// suspended, 2 the provider's release made, 3 the earlier release gone, 4 all gone.
func (s handOverState) stage() int {
	switch {
	case !s.earlierRelease && !s.earlierRepo:
		return 4
	case !s.earlierRelease:
		return 3
	case s.ownRelease:
		return 2
	case s.earlierSuspended:
		return 1
	}
	return 0
}

// stageNames say what each stage of a hand-over looks like.
var stageNames = []string{
	"nothing done yet",
	"the earlier HelmRelease suspended, the provider's not made yet",
	"the provider's HelmRelease beside the suspended earlier one",
	"the earlier HelmRelease gone, its OCIRepository left",
	"nothing of the earlier installation left",
}

// handOver is one earlier installation on a ControlPlane and what the spec watches of it.
type handOver struct {
	cp      *env.ControlPlane
	earlier testenv.EarlierInstallation
	rgd     *unstructured.Unstructured
	insts   []*unstructured.Unstructured
	// kept: the RGD, its CRD, the instances, kro's Deployment and the first revision of
	// the Helm release.
	kept  []kept
	looks int
}

// newHandOver makes the earlier provider's installation of version for cp (the provider
// must be stopped), waits until helm-controller has installed kro through it, and, with
// tenantWork, puts an RGD and two instances of its kind on the ControlPlane.
func newHandOver(cp *env.ControlPlane, version string, tenantWork bool) *handOver {
	GinkgoHelper()
	var offered *v1alpha1.KroVersion
	for _, v := range fe.ProviderConfig().Spec.Versions {
		if v.Version == version {
			offered = v.DeepCopy()
		}
	}
	Expect(offered).NotTo(BeNil(), "the environment offers %s", version)
	src := &corev1.Secret{}
	Expect(fe.Platform.Client.Get(suiteCtx, client.ObjectKey{Namespace: fe.PodNamespace, Name: env.PullSecretName}, src)).To(Succeed())
	dir, err := testenv.ModuleDir(suiteCtx, openMCPAPIModule)
	Expect(err).NotTo(HaveOccurred())
	_, err = envtest.InstallCRDs(fe.Platform.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(dir, "crds", "manifests", "clusters.openmcp.cloud_accessrequests.yaml")}, ErrorIfPathMissing: true,
	})
	Expect(err).NotTo(HaveOccurred())

	h := &handOver{cp: cp, earlier: testenv.EarlierInstallation{
		KroName: cp.Name, TenantNamespace: cp.TenantNamespace,
		ChartURL: fe.ChartURL, ChartVersion: offered.ChartVersion,
		ChartPullSecret: src, Values: offered.HelmValues, Kubeconfig: cp.Kubeconfig, Interval: 10 * time.Second,
	}}
	if offered.HelmValues != nil {
		h.earlier.ImagePullSecrets = []*corev1.Secret{src}
	}
	Expect(h.earlier.Create(suiteCtx, fe.Platform.Client, cp.Client, cp.Namespace, true)).To(Succeed())
	DeferCleanup(h.removeAfterFailure)
	waitUntil(3*time.Minute, poll, func(g Gomega) {
		hr := h.earlier.HelmRelease()
		g.Expect(fe.Platform.Client.Get(suiteCtx, client.ObjectKeyFromObject(hr), hr)).To(Succeed())
		g.Expect(fluxReady(hr.Status.Conditions).Status).To(Equal(metav1.ConditionTrue), "%v", hr.Status.Conditions)
	})
	var deployments appsv1.DeploymentList
	waitUntil(time.Minute, poll, func(g Gomega) {
		g.Expect(cp.Client.List(suiteCtx, &deployments, client.InNamespace(owned.KroNamespace))).To(Succeed())
		g.Expect(deployments.Items).To(HaveLen(1), "kro's chart makes one Deployment")
	})
	h.remember(kept{what: "kro's Deployment", key: client.ObjectKeyFromObject(&deployments.Items[0]),
		obj: func() client.Object { return &appsv1.Deployment{} }})
	h.remember(kept{what: "the Helm release's first revision", key: client.ObjectKey{Namespace: owned.KroNamespace, Name: env.HelmReleaseSecretPrefix + "v1"},
		obj: func() client.Object { return &corev1.Secret{} }})
	if tenantWork {
		h.tenantWork()
	}
	return h
}

// removeAfterFailure deletes what is left of the earlier installation when the spec
// failed, so that the next fault starts from nothing on the ControlPlane: the HelmRelease
// resumed and deleted (Flux uninstalls kro), then the rest.
func (h *handOver) removeAfterFailure() {
	if !CurrentSpecReport().Failed() {
		return
	}
	hr := h.earlier.HelmRelease()
	if fe.Platform.Client.Get(suiteCtx, client.ObjectKeyFromObject(hr), hr) == nil {
		_ = fe.Platform.Client.Patch(suiteCtx, hr, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":false}}`)))
		_ = fe.Platform.Client.Delete(suiteCtx, hr)
		_ = wait(2*time.Minute, func() bool {
			return apierrors.IsNotFound(fe.Platform.Client.Get(suiteCtx, client.ObjectKeyFromObject(hr), hr))
		})
	}
	for _, o := range []client.Object{h.earlier.OCIRepository(), h.earlier.AccessRequest(h.cp.Namespace), h.earlier.AccessSecret(), h.earlier.ChartSecretCopy()} {
		_ = fe.Platform.Client.Delete(suiteCtx, o)
	}
	for _, o := range h.earlier.ImageSecretCopies() {
		_ = h.cp.Client.Delete(suiteCtx, o)
	}
}

// remember records the UID of an object that must keep it.
func (h *handOver) remember(k kept) {
	GinkgoHelper()
	obj := k.obj()
	waitUntil(time.Minute, poll, func(g Gomega) { g.Expect(h.cp.Client.Get(suiteCtx, k.key, obj)).To(Succeed()) })
	k.uid = obj.GetUID()
	h.kept = append(h.kept, k)
}

// kroObject is an empty object of one of kro's kinds.
func kroObject(kind string) func() client.Object {
	return func() client.Object {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kro.run/v1alpha1", "kind": kind}}
	}
}

// tenantWork is the tenant's: an RGD and two instances of its kind, reconciled by kro.
func (h *handOver) tenantWork() {
	GinkgoHelper()
	Expect(fe.StartKroController(suiteCtx, h.cp)).To(Succeed())
	h.rgd = testenv.ConfigMapRGD("handover-app", "HandoverApp")
	Expect(h.cp.Client.Create(suiteCtx, h.rgd)).To(Succeed())
	h.remember(kept{what: "the RGD", key: client.ObjectKey{Name: "handover-app"}, obj: kroObject("ResourceGraphDefinition"), tenant: true})
	h.remember(kept{what: "the RGD's CRD", key: client.ObjectKey{Name: "handoverapps.kro.run"}, tenant: true,
		obj: func() client.Object { return &apiextensionsv1.CustomResourceDefinition{} }})
	for _, name := range []string{"one", "two"} {
		inst := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kro.run/v1alpha1", "kind": "HandoverApp",
			"metadata": map[string]any{"name": "handover-" + name, "namespace": "default"},
			"spec":     map[string]any{"name": "handover-" + name},
		}}
		waitUntil(time.Minute, poll, func(g Gomega) { g.Expect(h.cp.Client.Create(suiteCtx, inst.DeepCopy())).To(Succeed()) })
		h.insts = append(h.insts, inst)
		h.remember(kept{what: "instance " + name, key: client.ObjectKeyFromObject(inst), obj: kroObject("HandoverApp"), tenant: true})
	}
}

// look reads the state and stops the spec on anything that must never happen (StopTrying
// ends the Eventually around it at once): two HelmReleases driving the release, or
// anything of the tenant's, kro's Deployment or the release's first revision replaced or
// gone.
func (h *handOver) look(g Gomega) handOverState {
	h.looks++
	var s handOverState
	var list helmv2.HelmReleaseList
	g.Expect(fe.Platform.Client.List(suiteCtx, &list, client.InNamespace(h.cp.TenantNamespace))).To(Succeed())
	for _, hr := range list.Items {
		if hr.Spec.ReleaseName == owned.ReleaseName && hr.Spec.TargetNamespace == owned.KroNamespace && !hr.Spec.Suspend {
			s.driving++
		}
		switch hr.Name {
		case testenv.EarlierHelmReleaseName:
			s.earlierRelease, s.earlierSuspended = true, hr.Spec.Suspend
		case fe.ProviderName:
			s.ownRelease = true
		}
	}
	if s.driving > 1 {
		StopTrying(fmt.Sprintf("look %d: %d HelmReleases drive the Helm release kro", h.looks, s.driving)).Now()
	}
	err := fe.Platform.Client.Get(suiteCtx, client.ObjectKeyFromObject(h.earlier.OCIRepository()), h.earlier.OCIRepository())
	s.earlierRepo = err == nil
	for _, k := range h.kept {
		obj := k.obj()
		err := h.cp.Client.Get(suiteCtx, k.key, obj)
		switch {
		case apierrors.IsNotFound(err):
			StopTrying(fmt.Sprintf("look %d: %s is gone", h.looks, k.what)).Now()
		case err == nil && obj.GetUID() != k.uid:
			StopTrying(fmt.Sprintf("look %d: %s was replaced (UID %s, was %s)", h.looks, k.what, obj.GetUID(), k.uid)).Now()
		}
		g.Expect(err).NotTo(HaveOccurred())
	}
	return s
}

// finished: the Kro is Ready with its version's chart and nothing of the earlier
// installation is left; its copies on the ControlPlane are the provider's now.
func (h *handOver) finished(g Gomega, chart string) {
	s := h.look(g)
	g.Expect(s.stage()).To(Equal(4), "earlier objects left: %+v", s)
	expectKroReady(g, h.cp, chart)
	g.Expect(condition(getKroOf(g, h.cp), v1alpha1.ConditionHandOver).Status).To(Equal(metav1.ConditionStatus("absent")))
	for _, cp := range h.earlier.ImageSecretCopies() {
		got := &corev1.Secret{}
		g.Expect(h.cp.Client.Get(suiteCtx, client.ObjectKeyFromObject(cp), got)).To(Succeed())
		g.Expect(got.Labels).To(HaveKeyWithValue(v1alpha1.LabelManagedBy, v1alpha1.ManagedByValue), "copy %s not adopted", cp.Name)
	}
}

// earlierGone checks that nothing of the earlier installation is left on the platform
// cluster, and with copies, none of its image pull secret copies on the ControlPlane
// either (adopted ones are the provider's until the Kro is deleted).
func (h *handOver) earlierGone(copies bool) {
	GinkgoHelper()
	objs := []client.Object{h.earlier.HelmRelease(), h.earlier.OCIRepository(), h.earlier.AccessRequest(h.cp.Namespace), h.earlier.AccessSecret(), h.earlier.ChartSecretCopy()}
	for _, o := range objs {
		err := fe.Platform.Client.Get(suiteCtx, client.ObjectKeyFromObject(o), o)
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T %s is left: %v", o, o.GetName(), err)
	}
	for _, o := range h.earlier.ImageSecretCopies() {
		if !copies {
			break
		}
		err := h.cp.Client.Get(suiteCtx, client.ObjectKeyFromObject(o), o)
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "image pull secret copy %s is left: %v", o.Name, err)
	}
}

// removeTenantWork deletes the instances, then the RGD, and waits until they are gone.
func (h *handOver) removeTenantWork() {
	GinkgoHelper()
	if h.rgd == nil {
		return
	}
	for _, inst := range h.insts {
		Expect(client.IgnoreNotFound(h.cp.Client.Delete(suiteCtx, inst.DeepCopy()))).To(Succeed())
	}
	for _, inst := range h.insts {
		waitUntil(2*time.Minute, poll, func(g Gomega) {
			g.Expect(apierrors.IsNotFound(h.cp.Client.Get(suiteCtx, client.ObjectKeyFromObject(inst), inst.DeepCopy()))).To(BeTrue())
		})
	}
	Expect(client.IgnoreNotFound(h.cp.Client.Delete(suiteCtx, h.rgd.DeepCopy()))).To(Succeed())
	h.kept = slices.DeleteFunc(h.kept, func(k kept) bool { return k.tenant })
	h.rgd = nil
}

// earlierInstalled is where every hand-over spec starts: the provider stopped (and
// restarted after a failure), the earlier installation of version made on cp, with the
// tenant's work when asked for, and the Kro as the earlier provider left it, with
// spec.version kroVersion.
func earlierInstalled(cp *env.ControlPlane, version string, tenantWork bool, kroVersion string) *handOver {
	GinkgoHelper()
	cleanUpAfterFailure(cp)
	Expect(fe.KillProvider()).To(Succeed())
	DeferCleanup(restartProviderIfDead)
	h := newHandOver(cp, version, tenantWork)
	kroAsEarlierLeftIt(cp, kroVersion)
	return h
}

// kroAsEarlierLeftIt creates the Kro the earlier provider served: with the finalizer,
// whose string is the same as the provider's.
func kroAsEarlierLeftIt(cp *env.ControlPlane, version string) {
	GinkgoHelper()
	kro := kroOf(cp)
	kro.Spec.Version = version
	kro.Finalizers = []string{v1alpha1.Finalizer}
	Expect(fe.Onboarding.Client.Create(suiteCtx, kro)).To(Succeed())
}

// handOverSpecs registers the hand-over specs in the faults container; a gives its
// ControlPlane a.
func handOverSpecs(a func() *env.ControlPlane) {
	It("hand-over from the earlier provider, with the tenant's RGD and instances", func() {
		row := startRow("The earlier provider's installation (v0.9.4, kro installed by its HelmRelease) with an RGD and two instances; this provider started",
			"one HelmRelease drives the release at every look; RGD, CRD, instances, kro's Deployment and the release's first revision keep their UIDs; Ready; the earlier objects removed, its copies adopted; nothing orphaned after the deletion")
		cp := a()
		h := earlierInstalled(cp, "v0.9.4", true, "v0.9.4")
		Expect(fe.RestartProvider(suiteCtx)).To(Succeed())
		started := time.Now()
		took := waitUntil(3*time.Minute, poll, func(g Gomega) { h.finished(g, "0.9.4") })
		row.note("a single Ready installation %s after the provider started; %d looks, never two HelmReleases driving the release", ms(took), h.looks)
		row.converged(time.Since(started), "after the provider started", 0, "")
		h.earlierGone(false)
		h.removeTenantWork()
		deleteAndCheck(row, cp)
		h.earlierGone(true)
	})

	It("hand-over killed at each step", func() {
		row := startRow("The hand-over with the provider SIGKILLed at each step it could be caught in, and restarted",
			"the hand-over finishes after every restart: one HelmRelease drives the release at every look, the release is never reinstalled; nothing orphaned")
		cp := a()
		h := earlierInstalled(cp, "v0.9.4", false, "v0.9.4")
		started := time.Now()
		last := 0
		for last < 4 {
			Expect(fe.RestartProvider(suiteCtx)).To(Succeed())
			var s handOverState
			waitUntil(3*time.Minute, 20*time.Millisecond, func(g Gomega) {
				s = h.look(g)
				g.Expect(s.stage()).To(BeNumerically(">", last))
			})
			if s.stage() == 4 {
				row.note("reached the end after a restart")
				break
			}
			Expect(fe.KillProvider()).To(Succeed())
			row.note("killed at step %d (%s)", s.stage(), stageNames[s.stage()])
			last = s.stage()
		}
		waitUntil(3*time.Minute, poll, func(g Gomega) { h.finished(g, "0.9.4") })
		row.converged(time.Since(started), "after the first start", 0, "")
		h.earlierGone(false)
		deleteAndCheck(row, cp)
		h.earlierGone(true)
	})

	It("hand-over of a Kro whose version is no longer on offer", func() {
		row := startRow("The earlier provider's installation of a Kro whose version (v0.8.0) is not on offer; then the Kro deleted with an RGD on the ControlPlane",
			"the earlier installation is left running and HandOver says so; the deletion is guarded, Flux uninstalls kro through the earlier HelmRelease; nothing orphaned, the earlier objects included")
		cp := a()
		h := earlierInstalled(cp, "v0.9.3", true, "v0.8.0")
		Expect(fe.RestartProvider(suiteCtx)).To(Succeed())
		waitUntil(time.Minute, poll, func(g Gomega) {
			kro := getKroOf(g, cp)
			g.Expect(condition(kro, v1alpha1.ConditionVersionResolved).Reason).To(Equal(v1alpha1.ReasonVersionNotOffered), describeKro(kro))
			g.Expect(condition(kro, v1alpha1.ConditionHandOver).Status).To(Equal(metav1.ConditionTrue), describeKro(kro))
		})
		Consistently(func(g Gomega) {
			s := h.look(g)
			g.Expect(s.stage()).To(Equal(0), "the earlier installation was touched: %+v", s)
		}).WithContext(suiteCtx).WithTimeout(5 * time.Second).WithPolling(poll).Should(Succeed())
		row.note("VersionNotOffered; HandOver=True; the earlier HelmRelease untouched for 5 s")
		guard := guardFinalizer(cp)
		Expect(fe.Onboarding.Client.Delete(suiteCtx, kroOf(cp))).To(Succeed())
		var blocked metav1.Condition
		waitUntil(time.Minute, poll, func(g Gomega) { blocked = expectBlocked(g, cp, v1alpha1.ReasonUserResourcesPresent, "handover-app") })
		row.note("the deletion blocked: %s", blocked.Message)
		waitUntil(10*time.Second, poll, func(g Gomega) { h.look(g) })
		h.removeTenantWork()
		released := time.Now()
		waitGone(5*time.Minute, cp)
		row.converged(time.Since(released), "after the RGD was deleted", 0, "")
		row.finalizerGuard(guard())
		checkLeftovers(row, true, cp)
		h.earlierGone(true)
	})

	It("deletion in the middle of a hand-over to a chart tag that does not exist", func() {
		row := startRow("The earlier provider's installation (v0.9.4) taken over towards a version whose chart tag does not exist, and the Kro deleted in the middle",
			"the provider's HelmRelease never writes a revision; the deletion uninstalls kro through the earlier HelmRelease, resumed and deleted; nothing orphaned, kro's Helm release included")
		cp := a()
		const missing = "v0.0.0-missing-tag"
		updateProviderConfig(fe, func(pc *v1alpha1.ProviderConfig) {
			pc.Spec.Versions = append(pc.Spec.Versions, v1alpha1.KroVersion{Version: missing, ChartVersion: "0.0.0-missing-tag", ChartURL: fe.ChartURL, ChartPullSecret: env.PullSecretName})
		})
		DeferCleanup(func() {
			updateProviderConfig(fe, func(pc *v1alpha1.ProviderConfig) {
				pc.Spec.Versions = slices.DeleteFunc(pc.Spec.Versions, func(v v1alpha1.KroVersion) bool { return v.Version == missing })
			})
		})
		h := earlierInstalled(cp, "v0.9.4", false, missing)
		Expect(fe.RestartProvider(suiteCtx)).To(Succeed())
		waitUntil(2*time.Minute, poll, func(g Gomega) {
			g.Expect(h.look(g).stage()).To(Equal(2), "the provider's HelmRelease beside the suspended earlier one")
			own := &helmv2.HelmRelease{}
			g.Expect(fe.Platform.Client.Get(suiteCtx, fluxKeyOf(cp), own)).To(Succeed())
			g.Expect(own.Status.History).To(BeEmpty())
			repo := &sourcev1.OCIRepository{}
			g.Expect(fe.Platform.Client.Get(suiteCtx, fluxKeyOf(cp), repo)).To(Succeed())
			g.Expect(fluxReady(repo.Status.Conditions).Status).To(Equal(metav1.ConditionFalse), "source-controller finds no chart of that tag")
		})
		row.note("the provider's HelmRelease beside the suspended earlier one, its OCIRepository not Ready, no revision written")
		guard := guardFinalizer(cp)
		deleted := time.Now()
		Expect(fe.Onboarding.Client.Delete(suiteCtx, kroOf(cp))).To(Succeed())
		waitGone(5*time.Minute, cp)
		row.converged(time.Since(deleted), "after the Kro was deleted", 0, "")
		row.finalizerGuard(guard())
		checkLeftovers(row, true, cp)
		h.earlierGone(true)
		waitUntil(time.Minute, poll, func(g Gomega) {
			g.Expect(helmReleaseSecrets(g, cp)).To(BeEmpty(), "kro's Helm release is uninstalled")
			var deployments appsv1.DeploymentList
			g.Expect(cp.Client.List(suiteCtx, &deployments, client.InNamespace(owned.KroNamespace))).To(Succeed())
			g.Expect(deployments.Items).To(BeEmpty(), "kro's Deployment is uninstalled")
		})
	})

	It("hand-over of a Kro that is already being deleted", func() {
		row := startRow("The earlier provider's installation of a Kro already being deleted when this provider starts",
			"the deletion finishes through the earlier HelmRelease (Flux uninstalls kro); the provider's own objects are never made; nothing orphaned, the earlier objects included")
		cp := a()
		h := earlierInstalled(cp, "v0.9.4", false, "v0.9.4")
		guard := guardFinalizer(cp)
		Expect(fe.Onboarding.Client.Delete(suiteCtx, kroOf(cp))).To(Succeed())
		Expect(fe.RestartProvider(suiteCtx)).To(Succeed())
		started := time.Now()
		waitGone(5*time.Minute, cp)
		row.note("the Kro gone through the earlier HelmRelease's uninstall")
		row.converged(time.Since(started), "after the provider started", 0, "")
		row.finalizerGuard(guard())
		checkLeftovers(row, true, cp)
		h.earlierGone(true)
		own := &helmv2.HelmRelease{}
		err := fe.Platform.Client.Get(suiteCtx, fluxKeyOf(cp), own)
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the provider made a HelmRelease for a Kro being deleted")
	})
}
