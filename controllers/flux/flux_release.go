package flux

import (
	"fmt"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// UninstallAwaited says what a deletion waits for once the HelmRelease is deleted.
func UninstallAwaited(hr *helmv2.HelmRelease) string {
	return fmt.Sprintf("waiting for Flux to uninstall kro from the ControlPlane and remove HelmRelease %s/%s", hr.Namespace, hr.Name)
}

// UninstallBegan says when Flux began to uninstall kro: when its HelmRelease was deleted.
func UninstallBegan(hr *helmv2.HelmRelease) string {
	return fmt.Sprintf("Flux began uninstalling kro at %s (HelmRelease %s/%s is being deleted)",
		hr.DeletionTimestamp.UTC().Format(time.RFC3339), hr.Namespace, hr.Name)
}

// UninstallError is what helm-controller reports about a HelmRelease being deleted
// whose Ready condition is False: its reason, and "Flux says: <reason>: <message>"; both
// "" when it reports no failure.
func UninstallError(hr *helmv2.HelmRelease) (reason, text string) {
	c := step.FindCondition(hr.Status.Conditions, v1alpha1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse {
		return "", ""
	}
	return c.Reason, fmt.Sprintf("Flux says: %s: %s", c.Reason, step.ShortenMessage(c.Message))
}

// ReleasePlacement is where a HelmRelease of the provider installs kro: kro-system on
// the ControlPlane as release "kro", or a tenant's namespace on a workload cluster.
func ReleasePlacement(hr *helmv2.HelmRelease) v1alpha1.Placement {
	if hr.Spec.ReleaseName == owned.ReleaseName && hr.Spec.TargetNamespace == owned.KroNamespace {
		return v1alpha1.PlacementControlPlane
	}
	return v1alpha1.PlacementWorkloadCluster
}

// UninstallNote is what Flux reports about the uninstall, if anything.
func UninstallNote(hr *helmv2.HelmRelease) string {
	if _, text := UninstallError(hr); text != "" {
		return text
	}
	return "kro is installed on the new side once the uninstall is done"
}
