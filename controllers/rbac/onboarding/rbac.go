// Package onboarding holds the RBAC markers of what the provider does on the onboarding
// cluster, and nothing else. `task generate` turns them into the ClusterRole
// service-provider-kro-onboarding in config/rbac/onboarding/role.yaml. The tests in
// cmd/service-provider-kro/rbac_test.go run the provider with only these permissions
// through a Kro's whole life; docs/rbac.md explains each rule.
//
// Cluster-wide, because Kros live in every ControlPlane's namespace:
//   - Kros: the manager's cache lists and watches them (every read goes through it, so no
//     get); the reconciler patches them to add and remove its finalizer and to drop the
//     operation annotation.
//   - Kros' status: one merge patch per reconcile that changed something.
//   - Events (events.k8s.io): the reconciler's events on Kros; patch counts up a
//     repeated event.
//   - The Kro CRD, and no other CRD (resourceNames): it carries the claim of the one
//     environment that serves the onboarding cluster (kro.services.open-control-plane.io/environment).
//     run reads it at start (get) and claims it when no environment holds it yet (patch),
//     and follows it while running (list and watch, by name) so that it stops when
//     another environment takes it.
//   - Namespaces: the ProviderConfig reconciler's cache lists and watches their metadata:
//     a rollout's canaries (spec.rollout.canary) are chosen by the labels of a Kro's
//     Namespace, which tenants cannot write.
//
// Not granted: update on kroes/finalizers. The provider sets no owner references on
// other objects pointing at a Kro, so OwnerReferencesPermissionEnforcement never asks
// for it; the finalizer itself is added with a patch of the Kro.
package onboarding

// +kubebuilder:rbac:groups=kro.services.open-control-plane.io,resources=kroes,verbs=list;watch;patch
// +kubebuilder:rbac:groups=kro.services.open-control-plane.io,resources=kroes/status,verbs=patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch;patch,resourceNames=kroes.kro.services.open-control-plane.io
