package controllers

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// Strings that come from elsewhere, a version with build metadata or an RGD's reason
// beyond the status's limit, must not freeze a status; nor may a status the API server
// refuses for any other reason.

func TestVersionWithBuildMetadataIsServed(t *testing.T) {
	g := withClusters(t)
	e := startProviderConfigReconciler(t, g, false)
	version := "v0.9.4+mirror." + strings.ToLower(uniq("b")) // '+' is not allowed in a label value
	e.create(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.4"})

	pc := e.eventuallyReady(g, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, version)
	g.Expect(pc.Status.Versions).To(ContainElement(HaveField("Version", version)))
	list := &appsv1.ControllerRevisionList{}
	g.Expect(platform.Client.List(context.Background(), list, client.InNamespace(e.podNamespace))).To(Succeed())
	g.Expect(list.Items).To(HaveLen(1), "the version's artifacts are kept as a revision")
	label := list.Items[0].Labels[v1alpha1.LabelVersion]
	g.Expect(label).To(Equal(foreign.LabelValue(version)))
	g.Expect(label).To(HavePrefix("v0.9.4-mirror."))
	g.Expect(validation.IsValidLabelValue(label)).To(BeEmpty())
}

func TestVersionWithBuildMetadataInstallsKro(t *testing.T) {
	g := withClusters(t)
	version := "v0.9.4+" + strings.ToLower(uniq("build"))
	offerVersion(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.4"})
	defer withdrawVersion(g, version)
	k := readyKro(t, g, newNamespace(t, g), "build-metadata", version)
	g.Expect(k.Status.Revision).NotTo(BeEmpty(), "installed with the version's revision")
	g.Expect(validation.IsDNS1123Subdomain(k.Status.Revision)).To(BeEmpty())
}

func TestLongRGDReasonDoesNotFreezeTheKro(t *testing.T) {
	g := withClusters(t)
	cp := startControlPlane(t, g, "long-reason", true)
	k := readyKroOn(t, g, cp, newNamespace(t, g), "long-reason", baseVersion)

	// kro, or a tenant writing the RGD's status, gives a reason far over the status's 128
	// characters, with characters no condition reason may hold, and a message over 512.
	first, second := uniq("first"), uniq("second")
	newRGD(g, cp.Client, first)
	reason := "Failed: " + strings.Repeat("VeryLongReason ", 30) + "\n\x00ü"
	setRGDReady(g, cp.Client, first, metav1.ConditionFalse, reason, strings.Repeat("message ", 200))
	g.Eventually(func(g Gomega) {
		sum := rgdSummary(g, k)
		g.Expect(sum.Total).To(BeEquivalentTo(1))
		g.Expect(sum.NotReady).To(HaveLen(1))
		g.Expect(len(sum.NotReady[0].Reason)).To(BeNumerically("<=", 128))
		g.Expect(sum.NotReady[0].Reason).To(HavePrefix("Failed:VeryLongReason"))
		g.Expect(len(sum.NotReady[0].Message)).To(BeNumerically("<=", 512))
	}, timeout, interval).Should(Succeed())

	// The status goes on: a second RGD is counted, and Ready is reported when both are.
	newRGD(g, cp.Client, second)
	setRGDReady(g, cp.Client, second, metav1.ConditionTrue, "Ready", "")
	g.Eventually(func(g Gomega) { g.Expect(rgdSummary(g, k).Total).To(BeEquivalentTo(2)) }, timeout, interval).Should(Succeed())
	setRGDReady(g, cp.Client, first, metav1.ConditionTrue, "Ready", "")
	eventuallyCondition(g, k, v1alpha1.ConditionResourceGraphDefinitionsReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, "2 ResourceGraphDefinitions")
	g.Expect(condition(getKro(g, k), v1alpha1.ConditionReady).Reason).NotTo(Equal(v1alpha1.ReasonStatusRefused))
}

// refuseStatuses makes the API server refuse every status of the resource (kroes or
// providerconfigs) with one of the given names that is not a minimal one (Ready with
// reason StatusRefused), as it would refuse a status over a limit nobody foresaw. It
// returns a function that lifts the refusal.
func refuseStatuses(t *testing.T, g Gomega, c *testenv.Cluster, resource string, names ...string) func() {
	t.Helper()
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: uniq("refuse-status")},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				ResourceNames: names,
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{resource + "/status"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: `has(object.status.conditions) && object.status.conditions.exists(c, c.type == 'Ready' && c.reason == 'StatusRefused')`,
				Message:    "status.managedResources[0].message: Too long: may not be more than 512 bytes (the test's stand-in for a refused status)",
				Reason:     ptr.To(metav1.StatusReasonInvalid),
			}},
		},
	}
	g.Expect(c.Client.Create(ctx, policy)).To(Succeed())
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: policy.Name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	g.Expect(c.Client.Create(ctx, binding)).To(Succeed())
	lift := func() {
		_ = c.Client.Delete(ctx, binding)
		_ = c.Client.Delete(ctx, policy)
	}
	t.Cleanup(lift)
	return lift
}

func TestRefusedKroStatusFallsBackToAMinimalOne(t *testing.T) {
	g := withClusters(t)
	ns := newNamespace(t, g)
	name := "refused"
	lift := refuseStatuses(t, g, onboarding, "kroes", name)
	// The policy takes effect once the API server has loaded it: a status it refuses.
	probe := newKro(g, ns, name, baseVersion)
	g.Eventually(func(g Gomega) {
		got := getKro(g, probe)
		got.Status.Phase = v1alpha1.PhaseProgressing
		got.Status.Conditions = nil
		g.Expect(apierrors.IsInvalid(onboarding.Client.Status().Update(context.Background(), got))).To(BeTrue())
	}, timeout, interval).Should(Succeed())

	grantAccess(g, probe, controlPlane)
	k := eventuallyCondition(g, probe, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonStatusRefused,
		"the API server refused the Kro status", "Too long", "report this as a bug")
	g.Expect(k.Status.ObservedGeneration).To(Equal(k.Generation), "the status is not frozen at an older generation")
	g.Expect(k.Status.Phase).To(Equal(v1alpha1.PhaseProgressing))
	g.Expect(k.Status.ManagedResources).To(BeEmpty())
	eventuallyEvent(g, k, "Warning/"+v1alpha1.ReasonStatusRefused, "the API server refused the Kro status")

	// Once the API server accepts statuses again, the full one comes back.
	lift()
	g.Eventually(func(g Gomega) { fluxReady(g, getOCIRepository(g, k), metav1.ConditionTrue, "stored artifact") }, timeout, interval).Should(Succeed())
	g.Eventually(func(g Gomega) { getHelmRelease(g, k) }, timeout, interval).Should(Succeed())
	fluxReady(g, getHelmRelease(g, k), metav1.ConditionTrue, "Helm install succeeded")
	k = eventuallyCondition(g, k, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
	g.Expect(k.Status.ManagedResources).NotTo(BeEmpty())
	deleteKro(g, k)
	eventuallyGone(g, onboarding.Client, k)
}

func TestRefusedProviderConfigStatusFallsBackToAMinimalOne(t *testing.T) {
	g := withClusters(t)
	e := startProviderConfigReconciler(t, g, false)
	probe := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: uniq("probe")}, Spec: v1alpha1.ProviderConfigSpec{
		Versions: []v1alpha1.KroVersion{{Version: "v1", ChartVersion: "0.9.4"}}}}
	lift := refuseStatuses(t, g, platform, "providerconfigs", e.name, probe.Name)
	// No reconciler writes the probe's status: once the API server refuses it, the policy
	// is in effect.
	g.Expect(platform.Client.Create(context.Background(), probe)).To(Succeed())
	defer func() { _ = platform.Client.Delete(context.Background(), probe) }()
	g.Eventually(func(g Gomega) {
		g.Expect(platform.Client.Get(context.Background(), client.ObjectKeyFromObject(probe), probe)).To(Succeed())
		probe.Status.Phase = v1alpha1.PhaseProgressing
		g.Expect(apierrors.IsInvalid(platform.Client.Status().Update(context.Background(), probe))).To(BeTrue())
	}, timeout, interval).Should(Succeed())
	version := uniq("v")
	e.create(g, v1alpha1.KroVersion{Version: version, ChartVersion: "0.9.4"})

	pc := e.eventuallyReady(g, metav1.ConditionFalse, v1alpha1.ReasonStatusRefused, "the API server refused the ProviderConfig status", "Too long")
	g.Expect(pc.Status.Versions).To(BeEmpty(), "nothing the API server refused is in the minimal status")
	e.eventuallyEvent(g, "Warning/"+v1alpha1.ReasonStatusRefused, "the API server refused the ProviderConfig status")

	lift()
	g.Eventually(func(g Gomega) {
		g.Expect(platform.Client.Get(context.Background(), client.ObjectKeyFromObject(probe), probe)).To(Succeed())
		probe.Status.Phase = v1alpha1.PhaseReady
		g.Expect(platform.Client.Status().Update(context.Background(), probe)).To(Succeed())
	}, timeout, interval).Should(Succeed(), "the API server accepts statuses again")
	// A change brings the reconciler back; the full status is accepted now.
	g.Eventually(func(g Gomega) {
		pc := e.get(g)
		pc.Spec.Versions[0].ChartVersion = "0.9.5"
		g.Expect(platform.Client.Update(context.Background(), pc)).To(Succeed())
	}, timeout, interval).Should(Succeed())
	pc = e.eventuallyReady(g, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, version)
	g.Expect(pc.Status.Versions).To(ContainElement(HaveField("Version", version)))
	g.Expect(meta.FindStatusCondition(pc.Status.Conditions, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonReconcileSuccess))
}
