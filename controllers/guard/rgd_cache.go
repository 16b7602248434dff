package guard

import (
	"strings"

	krov1alpha1 "github.com/kubernetes-sigs/kro/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

// TrimRGD is the cache transform of the ResourceGraphDefinitions a ControlPlane's cache
// holds. It keeps what the provider reads of an RGD: its name and whether it is being
// deleted (the deletion guard), its state and its last Ready condition, whose reason and
// message are bounded as SummarizeRGDs bounds them (so the summary is the same). The
// spec (a tenant's schema and templates), the other conditions, the resources and every
// other field of the metadata go: a tenant administers its ControlPlane and can make
// hundreds of RGDs of a MiB each, with a condition message as large. It is idempotent, as
// the informer's watch-list applies it twice.
func TrimRGD(obj any) (any, error) {
	rgd, ok := obj.(*krov1alpha1.ResourceGraphDefinition)
	if !ok {
		return obj, nil
	}
	out := &krov1alpha1.ResourceGraphDefinition{
		TypeMeta: rgd.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: rgd.Name, UID: rgd.UID, ResourceVersion: rgd.ResourceVersion, Generation: rgd.Generation,
			CreationTimestamp: rgd.CreationTimestamp, DeletionTimestamp: rgd.DeletionTimestamp,
		},
		Status: krov1alpha1.ResourceGraphDefinitionStatus{State: krov1alpha1.ResourceGraphDefinitionState(strings.Clone(foreign.Text(string(rgd.Status.State), maxStateReason)))},
	}
	var ready *krov1alpha1.Condition
	for i := range rgd.Status.Conditions {
		if string(rgd.Status.Conditions[i].Type) == rgdReadyCondition {
			ready = &rgd.Status.Conditions[i]
		}
	}
	if ready != nil {
		c := krov1alpha1.Condition{Type: rgdReadyCondition, ObservedGeneration: ready.ObservedGeneration, LastTransitionTime: ready.LastTransitionTime,
			Status: metav1.ConditionStatus(strings.Clone(foreign.Text(string(ready.Status), maxStateReason)))}
		if ready.Reason != nil {
			r := strings.Clone(foreign.Reason(*ready.Reason, maxStateReason))
			c.Reason = &r
		}
		if ready.Message != nil {
			m := strings.Clone(foreign.Text(*ready.Message, foreign.StatusMessageMax))
			c.Message = &m
		}
		out.Status.Conditions = krov1alpha1.Conditions{c}
	}
	return out, nil
}
