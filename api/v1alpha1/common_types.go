package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Phase summarises an object's state in one word, as OpenControlPlane service providers do.
// +kubebuilder:validation:Enum=Ready;Progressing;Terminating
type Phase string

// The phases an object goes through.
const (
	// PhaseReady: every condition is True.
	PhaseReady Phase = "Ready"
	// PhaseProgressing: at least one condition is not True; its message says why.
	PhaseProgressing Phase = "Progressing"
	// PhaseTerminating: the object is being deleted.
	PhaseTerminating Phase = "Terminating"
)

// CommonStatus is the part of the status every object of this API carries.
type CommonStatus struct {
	// ObservedGeneration is the metadata.generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase summarises the conditions: Ready when all are True, Terminating while the
	// object is deleted, Progressing otherwise.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// Conditions describe the observed state in detail. Ready is always present once
	// the object has been reconciled.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types and reasons shared across the API.
const (
	// ConditionReady sums up all other conditions.
	ConditionReady = "Ready"

	// ReasonReconcileSuccess: the step or the whole object is done.
	ReasonReconcileSuccess = "ReconcileSuccess"
	// ReasonReconciling: work is under way, nothing is wrong.
	ReasonReconciling = "Reconciling"
	// ReasonReconcileError: something is wrong; the message says what to fix.
	ReasonReconcileError = "ReconcileError"
	// ReasonTerminating: the object is being deleted.
	ReasonTerminating = "Terminating"
	// ReasonStatusRefused: the API server refused the status the provider computed (a
	// value over a field's limit, say). The provider wrote this minimal status instead;
	// the message quotes what was refused.
	ReasonStatusRefused = "StatusRefused"
)
