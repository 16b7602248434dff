package controllers

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// Markers: one method per thing that can happen to a Kro, each setting the condition
// that reports it. The steps say what happened; the wording lives here.

func (o *observation) stepFailed(condType, what string, err error) {
	o.set(condType, metav1.ConditionFalse, v1alpha1.ReasonReconcileError, what+" failed: "+summarize(err))
}

func (o *observation) providerConfigMissing(name string, deleting bool) {
	msg := fmt.Sprintf("ProviderConfig %q not found on the platform cluster: the platform team must create it with the versions on offer", name)
	if deleting {
		msg = fmt.Sprintf("ProviderConfig %q is being deleted: the platform team must recreate it with the versions on offer", name)
	}
	o.set(v1alpha1.ConditionVersionResolved, metav1.ConditionFalse, v1alpha1.ReasonProviderConfigMissing, msg)
}

func (o *observation) versionNotOffered(version, providerConfig string, offered []string) {
	o.set(v1alpha1.ConditionVersionResolved, metav1.ConditionFalse, v1alpha1.ReasonVersionNotOffered, fmt.Sprintf(
		"version %q is not offered by ProviderConfig %q; versions on offer: %s", version, providerConfig, strings.Join(offered, ", ")))
}

func (o *observation) versionResolved(v *v1alpha1.KroVersion) {
	o.placement = v1alpha1.PlacementOf(v)
	o.set(v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, fmt.Sprintf(
		"version %s resolves to chart %s:%s", v.Version, versions.ChartURL(v), v.ChartVersion))
}

// invalidVersion: the version's entry cannot be used (its helmValues are no JSON object).
func (o *observation) invalidVersion(version string, err error) {
	o.set(v1alpha1.ConditionVersionResolved, metav1.ConditionFalse, v1alpha1.ReasonInvalidProviderConfig,
		fmt.Sprintf("version %s cannot be used: %s", version, err.Error()))
}

// versionHeldBack: a rollout has not yet admitted the Kro to the version's new
// artifacts, so it keeps those of the revision it runs.
func (o *observation) versionHeldBack(v *v1alpha1.KroVersion, running, update string) {
	o.placement = v1alpha1.PlacementOf(v)
	o.set(v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonRolloutPending, fmt.Sprintf(
		"version %s stays at chart %s:%s of revision %s until the rollout of revision %s admits this Kro",
		v.Version, versions.ChartURL(v), v.ChartVersion, running, update))
}

func (o *observation) pullSecretsNotReady(reason string, problems ...string) {
	o.set(v1alpha1.ConditionPullSecretsReady, metav1.ConditionFalse, reason, strings.Join(problems, "; "))
}

func (o *observation) pullSecretsReady(msg string) {
	o.set(v1alpha1.ConditionPullSecretsReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, msg)
}

// ownershipConflict reports an object of the provider's name that someone else made.
func (o *observation) ownershipConflict(condType, msg string) {
	o.set(condType, metav1.ConditionFalse, v1alpha1.ReasonOwnershipConflict, msg)
}

func (o *observation) accessReached(tenantNamespace, secret string) {
	o.set(v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess,
		fmt.Sprintf("the ControlPlane is reached through the kubeconfig in secret %s/%s", tenantNamespace, secret))
}

func (o *observation) accessNotAvailable(na *reach.NotAvailableError) {
	o.set(v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionFalse, na.ConditionReason(), na.Message)
}

func (o *observation) noTenantNamespace(err error) {
	o.set(v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionFalse, v1alpha1.ReasonReconcileError,
		"the ControlPlane's namespace on the platform cluster cannot be derived: "+summarize(err))
}

// rgdsNotKnownYet keeps what was reported of the RGDs before, right after an engagement
// (a restart, a rotation), rather than flip to Unknown and back.
func (o *observation) rgdsNotKnownYet(prev *metav1.Condition, why string) {
	o.rgdsKeep = true
	if prev != nil && prev.Reason != v1alpha1.ReasonNotChecked {
		o.set(prev.Type, prev.Status, prev.Reason, prev.Message)
		return
	}
	o.set(v1alpha1.ConditionResourceGraphDefinitionsReady, metav1.ConditionUnknown, v1alpha1.ReasonReconciling, why)
}

// blocked says what a deletion waits for, in DeletionBlocked and in Ready.
func (o *observation) blocked(reason, msg string) {
	o.set(v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, reason, msg)
	o.waitingFor = msg
}

// notBlocked says that nothing holds the deletion up, and why.
func (o *observation) notBlocked(reason, msg string) {
	o.set(v1alpha1.ConditionDeletionBlocked, metav1.ConditionFalse, reason, msg)
}
