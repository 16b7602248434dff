package clusters

import (
	"fmt"

	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	commonapi "github.com/openmcp-project/openmcp-operator/api/common"
	libutils "github.com/openmcp-project/openmcp-operator/lib/utils"
	"k8s.io/apimachinery/pkg/types"
)

// KubeconfigKey is the key of a kubeconfig in an access secret, in openmcp's secrets and
// in the labelled secrets of standalone mode alike.
const KubeconfigKey = "kubeconfig"

// TenantNamespace is the ControlPlane's namespace on the platform cluster, computed as
// openmcp computes it, so that the provider's objects sit beside openmcp's access secret.
func TenantNamespace(controlPlane types.NamespacedName) (string, error) {
	return libutils.StableMCPNamespace(controlPlane.Name, controlPlane.Namespace)
}

// accessSuffix is the suffix openmcp's cluster-access library gives MCP requests.
const accessSuffix = "mcp"

// NewAccessRequest returns the openmcp AccessRequest through which the provider asks for
// a ControlPlane's kubeconfig: in the tenant namespace, named with openmcp's helper (which
// shortens long names with a hash), referring to the ControlPlane's ClusterRequest.
//
// The token is bound to cluster-admin: kro's chart installs CRDs, cluster-wide RBAC that
// grants kro what RGDs need (unrestricted mode) and a Deployment, and Helm can only grant
// what it holds itself; the provider also copies secrets into kro-system and lists RGDs.
func NewAccessRequest(providerName string, controlPlane types.NamespacedName) (*clustersv1alpha1.AccessRequest, error) {
	meta, err := requestMeta(providerName, controlPlane, accessSuffix)
	if err != nil {
		return nil, err
	}
	return accessRequest(meta, controlPlane.Name, &clustersv1alpha1.TokenConfig{
		RoleRefs: []commonapi.RoleRef{{Kind: "ClusterRole", Name: "cluster-admin"}},
	}), nil
}

// GrantedSecret returns the name of the secret that holds the kubeconfig of a granted
// AccessRequest, or why there is none yet.
func GrantedSecret(ar *clustersv1alpha1.AccessRequest) (string, error) {
	switch {
	case ar.Status.IsDenied():
		return "", fmt.Errorf("openmcp denied AccessRequest %s/%s", ar.Namespace, ar.Name)
	case !ar.Status.IsGranted():
		return "", fmt.Errorf("waiting for openmcp to grant AccessRequest %s/%s", ar.Namespace, ar.Name)
	case ar.Status.SecretRef == nil || ar.Status.SecretRef.Name == "":
		return "", fmt.Errorf("AccessRequest %s/%s is granted but names no secret", ar.Namespace, ar.Name)
	}
	return ar.Status.SecretRef.Name, nil
}
