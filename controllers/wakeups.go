package controllers

import (
	"maps"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// What wakes a Kro up. A new Kro costs a reconcile for each event that reaches it, and
// most events on the objects the provider makes are its own writes echoed back: the
// creation of the Flux objects and of the secret copies, Flux's finalizer on them. The
// reconcile that wrote them has already seen what they hold, so these predicates let
// through only what the reconcile reads and someone else changed.

// fluxChanged lets through what a reconcile reads of a Kro's OCIRepository or
// HelmRelease: a change of its spec (generation), labels or annotations, or status, the
// start of its deletion, and its deletion. Its creation (by the provider: on a restart
// every Kro is reconciled anyway) and a finalizer added by Flux do not.
type fluxChanged struct{ predicate.Funcs }

func (fluxChanged) Create(event.CreateEvent) bool { return false }

func (fluxChanged) Update(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	return o.GetGeneration() != n.GetGeneration() ||
		!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
		!maps.Equal(o.GetLabels(), n.GetLabels()) ||
		!maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
		!equality.Semantic.DeepEqual(fluxStatus(o), fluxStatus(n))
}

// fluxStatus is the status of a Flux object, or the object itself for any other kind
// (then every update counts).
func fluxStatus(o client.Object) any {
	switch f := o.(type) {
	case *helmv2.HelmRelease:
		return &f.Status
	case *sourcev1.OCIRepository:
		return &f.Status
	default:
		return o
	}
}

// copyChanged lets through everything about the provider's secrets on the platform
// cluster but the creation of a copy in a tenant namespace: the provider made it, in the
// reconcile that the event would repeat. A source secret in the provider's own namespace
// that appears (a pull secret created after the ProviderConfig named it) still counts.
func copyChanged(podNamespace string) predicate.Funcs {
	return predicate.Funcs{CreateFunc: func(e event.CreateEvent) bool { return e.Object.GetNamespace() == podNamespace }}
}
