package step

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// Markers: one method per thing that can happen to a Kro, each setting the condition
// that reports it. The steps say what happened; the wording lives here.

// StepFailed reports a step that failed with err, under its condition.
func (o *Observation) StepFailed(condType, what string, err error) {
	o.Set(condType, metav1.ConditionFalse, v1alpha1.ReasonReconcileError, what+" failed: "+Summarize(err))
}

// ProviderConfigMissing reports that the ProviderConfig is missing or being deleted.
func (o *Observation) ProviderConfigMissing(name string, deleting bool) {
	msg := fmt.Sprintf("ProviderConfig %q not found on the platform cluster: the platform team must create it with the versions on offer", name)
	if deleting {
		msg = fmt.Sprintf("ProviderConfig %q is being deleted: the platform team must recreate it with the versions on offer", name)
	}
	o.Set(v1alpha1.ConditionVersionResolved, metav1.ConditionFalse, v1alpha1.ReasonProviderConfigMissing, msg)
}

// VersionNotOffered reports a version the ProviderConfig does not offer.
func (o *Observation) VersionNotOffered(version, providerConfig string, offered []string) {
	o.Set(v1alpha1.ConditionVersionResolved, metav1.ConditionFalse, v1alpha1.ReasonVersionNotOffered, fmt.Sprintf(
		"version %q is not offered by ProviderConfig %q; versions on offer: %s", version, providerConfig, strings.Join(offered, ", ")))
}

// VersionResolved reports the version's chart.
func (o *Observation) VersionResolved(v *v1alpha1.KroVersion) {
	o.Placement = v1alpha1.PlacementOf(v)
	o.Set(v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, fmt.Sprintf(
		"version %s resolves to chart %s:%s", v.Version, versions.ChartURL(v), v.ChartVersion))
}

// InvalidVersion reports that the version's entry cannot be used (its helmValues are no JSON object).
func (o *Observation) InvalidVersion(version string, err error) {
	o.Set(v1alpha1.ConditionVersionResolved, metav1.ConditionFalse, v1alpha1.ReasonInvalidProviderConfig,
		fmt.Sprintf("version %s cannot be used: %s", version, err.Error()))
}

// VersionHeldBack reports that a rollout has not yet admitted the Kro to the version's new
// artifacts, so it keeps those of the revision it runs.
func (o *Observation) VersionHeldBack(v *v1alpha1.KroVersion, running, update string) {
	o.Placement = v1alpha1.PlacementOf(v)
	o.Set(v1alpha1.ConditionVersionResolved, metav1.ConditionTrue, v1alpha1.ReasonRolloutPending, fmt.Sprintf(
		"version %s stays at chart %s:%s of revision %s until the rollout of revision %s admits this Kro",
		v.Version, versions.ChartURL(v), v.ChartVersion, running, update))
}

// PullSecretsNotReady reports what is wrong with the pull secrets.
func (o *Observation) PullSecretsNotReady(reason string, problems ...string) {
	o.Set(v1alpha1.ConditionPullSecretsReady, metav1.ConditionFalse, reason, strings.Join(problems, "; "))
}

// PullSecretsReady reports the pull secrets copied.
func (o *Observation) PullSecretsReady(msg string) {
	o.Set(v1alpha1.ConditionPullSecretsReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, msg)
}

// OwnershipConflict reports an object of the provider's name that someone else made.
func (o *Observation) OwnershipConflict(condType, msg string) {
	o.Set(condType, metav1.ConditionFalse, v1alpha1.ReasonOwnershipConflict, msg)
}

// AccessReached reports the ControlPlane reached through its kubeconfig secret.
func (o *Observation) AccessReached(tenantNamespace, secret string) {
	o.Set(v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess,
		fmt.Sprintf("the ControlPlane is reached through the kubeconfig in secret %s/%s", tenantNamespace, secret))
}

// AccessNotAvailable reports why the ControlPlane cannot be reached.
func (o *Observation) AccessNotAvailable(na *reach.NotAvailableError) {
	o.Set(v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionFalse, na.ConditionReason(), na.Message)
}

func (o *Observation) noTenantNamespace(err error) {
	o.Set(v1alpha1.ConditionControlPlaneAccessReady, metav1.ConditionFalse, v1alpha1.ReasonReconcileError,
		"the ControlPlane's namespace on the platform cluster cannot be derived: "+Summarize(err))
}

// KroAvailability reports whether kro's Deployment runs where kro is installed.
func (o *Observation) KroAvailability(available bool, msg string) {
	if available {
		o.Set(v1alpha1.ConditionKroAvailable, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, msg)
		return
	}
	o.Set(v1alpha1.ConditionKroAvailable, metav1.ConditionFalse, v1alpha1.ReasonKroUnavailable, msg)
}

// RgdsNotKnownYet keeps what was reported of the RGDs before, right after an engagement
// (a restart, a rotation), rather than flip to Unknown and back.
func (o *Observation) RgdsNotKnownYet(prev *metav1.Condition, why string) {
	o.RgdsKeep = true
	if prev != nil && prev.Reason != v1alpha1.ReasonNotChecked {
		o.Set(prev.Type, prev.Status, prev.Reason, prev.Message)
		return
	}
	o.Set(v1alpha1.ConditionResourceGraphDefinitionsReady, metav1.ConditionUnknown, v1alpha1.ReasonReconciling, why)
}

// Blocked says what a deletion waits for, in DeletionBlocked and in Ready.
func (o *Observation) Blocked(reason, msg string) {
	o.Set(v1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, reason, msg)
	o.WaitingFor = msg
}

// NotBlocked says that nothing holds the deletion up, and why.
func (o *Observation) NotBlocked(reason, msg string) {
	o.Set(v1alpha1.ConditionDeletionBlocked, metav1.ConditionFalse, reason, msg)
}

// AccessMissing records whether the ControlPlane's access is missing (na.Missing), and
// since when: the time already in the status, or now. Access that exists, even if it
// does not work, is not missing.
func (o *Observation) AccessMissing(kro *v1alpha1.Kro, na *reach.NotAvailableError, now time.Time) {
	o.AccessChecked = true
	switch {
	case na == nil || !na.Missing:
		o.AccessMissingSince = nil
	case kro.Status.AccessMissingSince != nil:
		o.AccessMissingSince = kro.Status.AccessMissingSince.DeepCopy()
	default:
		t := metav1.NewTime(now.Truncate(time.Second))
		o.AccessMissingSince = &t
	}
}
