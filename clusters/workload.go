package clusters

import (
	"fmt"
	"sort"

	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	commonapi "github.com/openmcp-project/openmcp-operator/api/common"
	openmcpconst "github.com/openmcp-project/openmcp-operator/api/constants"
	"github.com/openmcp-project/openmcp-operator/lib/clusteraccess/advanced"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Under openmcp, a Kro whose version places kro on a workload cluster has three more
// requests in its tenant namespace on the platform cluster, all named with openmcp's
// helper and labelled like the ControlPlane's AccessRequest:
//   - a ClusterRequest of purpose workload, which openmcp's scheduler answers with a
//     Cluster it may share between tenants;
//   - an AccessRequest to that Cluster for the provider and Flux, with rights in the
//     tenant's namespace there and on that one namespace only;
//   - an AccessRequest to the ControlPlane for kro itself, bound to kro's ClusterRoles.

// The suffixes of the requests' names.
const (
	workloadSuffix  = "workload"
	kroAccessSuffix = "kro"
)

// requestMeta is the metadata of a request of the provider's for a ControlPlane.
func requestMeta(providerName string, controlPlane types.NamespacedName, suffix string) (metav1.ObjectMeta, error) {
	ns, err := TenantNamespace(controlPlane)
	if err != nil {
		return metav1.ObjectMeta{}, err
	}
	return metav1.ObjectMeta{
		Name:      advanced.StableRequestName(providerName, reconcile.Request{NamespacedName: controlPlane}, suffix),
		Namespace: ns,
		Labels: map[string]string{
			openmcpconst.ManagedByLabel:           providerName,
			openmcpconst.OnboardingNameLabel:      controlPlane.Name,
			openmcpconst.OnboardingNamespaceLabel: controlPlane.Namespace,
		},
	}, nil
}

// WorkloadRequestKey is where the workload ClusterRequest and AccessRequest of a
// ControlPlane's kro are (they share the name).
func WorkloadRequestKey(providerName string, controlPlane types.NamespacedName) (types.NamespacedName, error) {
	return requestKey(providerName, controlPlane, workloadSuffix)
}

// KroAccessRequestKey is where the AccessRequest of kro's own access to a ControlPlane is.
func KroAccessRequestKey(providerName string, controlPlane types.NamespacedName) (types.NamespacedName, error) {
	return requestKey(providerName, controlPlane, kroAccessSuffix)
}

func requestKey(providerName string, controlPlane types.NamespacedName, suffix string) (types.NamespacedName, error) {
	meta, err := requestMeta(providerName, controlPlane, suffix)
	return types.NamespacedName{Namespace: meta.Namespace, Name: meta.Name}, err
}

// NewWorkloadClusterRequest asks openmcp for a workload cluster for a ControlPlane's kro.
func NewWorkloadClusterRequest(providerName string, controlPlane types.NamespacedName) (*clustersv1alpha1.ClusterRequest, error) {
	meta, err := requestMeta(providerName, controlPlane, workloadSuffix)
	if err != nil {
		return nil, err
	}
	return &clustersv1alpha1.ClusterRequest{
		TypeMeta:   metav1.TypeMeta{APIVersion: clustersv1alpha1.GroupVersion.String(), Kind: "ClusterRequest"},
		ObjectMeta: meta,
		Spec:       clustersv1alpha1.ClusterRequestSpec{Purpose: clustersv1alpha1.PURPOSE_WORKLOAD},
	}, nil
}

// NewWorkloadAccessRequest asks for access to the workload cluster of the ClusterRequest
// NewWorkloadClusterRequest makes. The rights are the tenant's: everything in namespace
// (which openmcp's cluster provider creates with the grant), and reading, labelling and
// deleting that namespace, nothing else, so that tenants sharing the cluster cannot
// reach each other. Flux installs kro's chart with the same access.
func NewWorkloadAccessRequest(providerName string, controlPlane types.NamespacedName, namespace string) (*clustersv1alpha1.AccessRequest, error) {
	meta, err := requestMeta(providerName, controlPlane, workloadSuffix)
	if err != nil {
		return nil, err
	}
	return accessRequest(meta, meta.Name, &clustersv1alpha1.TokenConfig{Permissions: WorkloadPermissions(namespace)}), nil
}

// accessRequest is an AccessRequest of the provider's (meta, from requestMeta) for a
// token to the cluster of the ClusterRequest named request in its namespace.
func accessRequest(meta metav1.ObjectMeta, request string, token *clustersv1alpha1.TokenConfig) *clustersv1alpha1.AccessRequest {
	return &clustersv1alpha1.AccessRequest{
		TypeMeta:   metav1.TypeMeta{APIVersion: clustersv1alpha1.GroupVersion.String(), Kind: "AccessRequest"},
		ObjectMeta: meta,
		Spec: clustersv1alpha1.AccessRequestSpec{
			RequestRef: &commonapi.ObjectReference{Name: request, Namespace: meta.Namespace},
			Token:      token,
		},
	}
}

// WorkloadPermissions are the provider's rights on a workload cluster for one tenant.
func WorkloadPermissions(namespace string) []clustersv1alpha1.PermissionsRequest {
	return []clustersv1alpha1.PermissionsRequest{
		{Namespace: namespace, Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}},
		{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{namespace},
			Verbs: []string{"get", "patch", "delete"}}}},
	}
}

// NewKroAccessRequest asks for kro's own access to a ControlPlane, bound to the
// ClusterRoles that kro's chart binds to its ServiceAccount (the provider puts them on
// the ControlPlane from the chart), so that kro holds exactly what its chart grants it,
// aggregated roles included.
func NewKroAccessRequest(providerName string, controlPlane types.NamespacedName, clusterRoles []string) (*clustersv1alpha1.AccessRequest, error) {
	meta, err := requestMeta(providerName, controlPlane, kroAccessSuffix)
	if err != nil {
		return nil, err
	}
	if len(clusterRoles) == 0 {
		return nil, fmt.Errorf("kro's chart binds no ClusterRole to its ServiceAccount, so kro's access to the ControlPlane would grant nothing")
	}
	roles := append([]string(nil), clusterRoles...)
	sort.Strings(roles)
	refs := make([]commonapi.RoleRef, 0, len(roles))
	for _, r := range roles {
		refs = append(refs, commonapi.RoleRef{Kind: "ClusterRole", Name: r})
	}
	return accessRequest(meta, controlPlane.Name, &clustersv1alpha1.TokenConfig{RoleRefs: refs}), nil
}
