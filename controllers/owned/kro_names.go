package owned

import (
	"k8s.io/apimachinery/pkg/types"
)

// Names of kro's own objects on the ControlPlane and of its credential on a workload cluster.
const (
	// KroServiceAccountName is kro's ServiceAccount in KroNamespace on the ControlPlane.
	KroServiceAccountName = "kro"
	// KroCredentialSecretName is the secret with kro's ControlPlane access in the
	// tenant's namespace on the workload cluster.
	KroCredentialSecretName = "kro-controlplane-access"
	// KroCredentialTokenKey is the data key of the ServiceAccount token in that secret.
	KroCredentialTokenKey = "token"
	// KroCredentialCAKey is the data key of the ControlPlane's CA bundle in that secret.
	KroCredentialCAKey = "ca.crt"
)

// KroServiceAccount is where kro's ServiceAccount lives on every ControlPlane.
var KroServiceAccount = types.NamespacedName{Namespace: KroNamespace, Name: KroServiceAccountName}
