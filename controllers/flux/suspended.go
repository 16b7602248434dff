package flux

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// A platform team suspends a Flux object on purpose (`flux suspend`, during an incident
// or a migration), so the provider leaves spec.suspend to whoever set it: it is the one
// field of its Flux objects that it does not take back (owned.takeOver). A suspended
// object is not reconciled by Flux, though, so what the provider applies meanwhile (a new
// version, new values) does not reach the ControlPlane: the Kro says so, under the
// object's condition and so in Ready, with the way out. The provider suspends a
// HelmRelease itself only right before it deletes it (SuspendRelease); those steps
// report on their own, and this one does not run then.

// reportSuspended replaces the condition of a Flux object of the Kro's that is suspended
// with one that says so. resume is the flux CLI's command for
// the object's kind ("helmrelease", "source oci").
func reportSuspended(obs *step.Observation, condType, kind, resume string, obj client.Object, suspended bool) {
	if !suspended {
		return
	}
	// No other manager owns spec.suspend: the provider set it, for a deletion or a move.
	by := "the provider, for a deletion or a move"
	if m := owned.SuspendedBy(obj); m != "" {
		by = fmt.Sprintf("field manager %q", m)
	}
	obs.Set(condType, metav1.ConditionFalse, v1alpha1.ReasonSuspended, fmt.Sprintf(
		"%s %s/%s is suspended (spec.suspend set by %s): Flux does not act on it, so the Kro's changes do not reach the ControlPlane; the provider leaves a suspend set on purpose in place: resume it with `flux resume %s -n %s %s`",
		kind, obj.GetNamespace(), obj.GetName(), by, resume, obj.GetNamespace(), obj.GetName()))
}
