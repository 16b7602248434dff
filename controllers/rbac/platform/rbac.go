// Package platform holds the RBAC markers of what the provider does on the platform
// cluster, and nothing else. `task generate` turns them into the ClusterRole
// service-provider-kro-platform and the Role service-provider-kro-platform (in the
// provider's namespace) in config/rbac/platform/role.yaml. The tests in
// cmd/service-provider-kro/rbac_test.go run the provider with only these permissions
// through a Kro's whole life; docs/rbac.md explains each rule.
//
// Cluster-wide, because every ControlPlane has its own tenant namespace, created on
// demand:
//   - ProviderConfigs: cluster-scoped; read through the cache only (no get). Their
//     status is patched (one merge patch when it changed) with the versions' pull
//     secret state and how many Kros use each version.
//   - Events (events.k8s.io): events on the ProviderConfig when its Ready condition
//     changes; patch counts up a repeated one. An event on a cluster-scoped object is
//     written to the namespace "default", which the generated manifests cannot hold a
//     Role for (every namespaced object of config/ is in the provider's namespace), so
//     the rule is cluster-wide.
//   - Namespaces: the tenant namespace is read and, where openmcp has not made it yet,
//     created. A namespace the provider created (it carries the provider's labels) is
//     deleted with its Kro once empty; no other namespace is ever updated or deleted.
//   - ConfigMaps and ServiceAccounts: listed (metadata only) in a tenant namespace the
//     provider created, to tell whether it is empty before deleting it.
//   - Secrets: list and watch everywhere, because the caches select the provider's own
//     copies and the ControlPlanes' kubeconfig secrets by label, and RBAC cannot restrict
//     by label; create, patch (server-side apply) and delete for the chart pull secret
//     copies in tenant namespaces; get for the uncached read of the kubeconfig secret
//     openmcp names in a granted AccessRequest (list already shows every secret, so get
//     widens nothing).
//   - AccessRequests (openmcp mode): the provider applies one per ControlPlane in its
//     tenant namespace, watches its own by label and deletes it with the Kro.
//   - AccessRequests (openmcp mode, WorkloadCluster placement): one for the workload
//     cluster and one for kro's own access to the ControlPlane, created, updated when
//     kro's ClusterRoles change, and deleted when kro leaves the workload cluster.
//   - ClusterRequests and Clusters (openmcp mode): a Kro's deletion reads them to tell a
//     ControlPlane that is gone or being deleted, which is dropped without an uninstall,
//     from one whose access merely does not work. ClusterRequests are watched (one per
//     ControlPlane), so that one being deleted brings the Kro back; the granted Cluster
//     is read uncached (get only). A Kro placed on a workload cluster has a
//     ClusterRequest of purpose workload of the provider's: created with it, deleted
//     when kro leaves the workload cluster.
//   - OCIRepositories and HelmReleases: applied, watched and deleted in tenant
//     namespaces; get for the uncached reads that tell one the provider made from one of
//     the same name someone else made (the cache shows only the provider's), before
//     creating or deleting it.
//   - TokenReviews and SubjectAccessReviews: with --metrics-secure, the metrics endpoint
//     asks the platform cluster who a scraper is and whether it may GET /metrics.
//
// In the provider's namespace only (a Role):
//   - ControllerRevisions: the revisions of the versions' artifacts, created before any
//     Kro runs them and deleted beyond the history (rollouts, spec.rollout).
//   - Leases: leader election; under --sharding, each replica's membership Lease
//     (created, renewed, deleted on stop) and a watch on the others'.
//   - Events (core/v1): the leader election's events on its Lease; patch counts up a
//     repeated one.
package platform

// +kubebuilder:rbac:groups=kro.services.open-control-plane.io,resources=providerconfigs,verbs=list;watch
// +kubebuilder:rbac:groups=kro.services.open-control-plane.io,resources=providerconfigs/status,verbs=patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;create;delete
// +kubebuilder:rbac:groups="",resources=configmaps;serviceaccounts,verbs=list
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=accessrequests,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=clusterrequests,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=clusters,verbs=get
// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=ocirepositories,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=helm.toolkit.fluxcd.io,resources=helmreleases,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=list;watch;create;delete,namespace=service-provider-kro-system
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;delete,namespace=service-provider-kro-system
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch,namespace=service-provider-kro-system
