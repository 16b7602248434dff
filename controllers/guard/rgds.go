package guard

import (
	krov1alpha1 "github.com/kubernetes-sigs/kro/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

// rgdReadyCondition is kro's root condition on an RGD.
const rgdReadyCondition = "Ready"

// maxStateReason is the length of an RGD's or an instance's reason in the status.
const maxStateReason = 128

// maxNotReadyRGDs bounds the list of RGDs that are not Ready in the status.
const maxNotReadyRGDs = 10

// SummarizeRGDs counts the RGDs and lists those that are not Ready, with the reason and
// message of their Ready condition. The list must be sorted by name.
func SummarizeRGDs(rgds []krov1alpha1.ResourceGraphDefinition) *v1alpha1.ResourceGraphDefinitionSummary {
	sum := &v1alpha1.ResourceGraphDefinitionSummary{Total: int32(len(rgds))}
	for i := range rgds {
		state := v1alpha1.ResourceGraphDefinitionState{Name: rgds[i].Name, Reason: "Pending", Message: "kro has not reported on it yet"}
		ready := false
		for _, c := range rgds[i].Status.Conditions {
			if string(c.Type) != rgdReadyCondition {
				continue
			}
			ready = c.Status == metav1.ConditionTrue
			// kro's words, or a tenant's: the status's limits hold whatever they are.
			state.Reason, state.Message = foreign.Reason(deref(c.Reason), maxStateReason), foreign.Text(deref(c.Message), foreign.StatusMessageMax)
			if state.Reason == "" {
				state.Reason = string(c.Status)
			}
		}
		if ready {
			sum.Ready++
			continue
		}
		if len(sum.NotReady) < maxNotReadyRGDs {
			sum.NotReady = append(sum.NotReady, state)
		}
	}
	return sum
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
