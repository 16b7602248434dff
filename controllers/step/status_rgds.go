package step

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// RgdCondition turns the summary into the Kro's condition.
func RgdCondition(obs *Observation, sum *v1alpha1.ResourceGraphDefinitionSummary) {
	notReady := sum.Total - sum.Ready
	if notReady == 0 {
		obs.Set(v1alpha1.ConditionResourceGraphDefinitionsReady, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess,
			fmt.Sprintf("%d ResourceGraphDefinitions on the ControlPlane, all Ready", sum.Total))
		return
	}
	names := make([]string, 0, len(sum.NotReady))
	for _, s := range sum.NotReady {
		names = append(names, s.Name+" ("+s.Reason+")")
	}
	obs.Set(v1alpha1.ConditionResourceGraphDefinitionsReady, metav1.ConditionFalse, v1alpha1.ReasonResourceGraphDefinitionsNotReady,
		fmt.Sprintf("%d of %d ResourceGraphDefinitions on the ControlPlane are not Ready: %s; see status.resourceGraphDefinitions and each RGD's status",
			notReady, sum.Total, ListNames(names)))
}
