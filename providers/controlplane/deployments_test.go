package controlplane

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestTrimDeployment: the cache keeps of a Deployment its name, Helm's marks, its
// replicas and rollout status, and the Available and Progressing conditions with bounded
// messages; a pod template of any size, managed fields, other labels, annotations and
// conditions go.
func TestTrimDeployment(t *testing.T) {
	g := NewWithT(t)
	big := strings.Repeat("x", 1<<20)
	in := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "kro-system", Name: "kro", Generation: 3, ResourceVersion: "7", UID: "u",
			Labels:        map[string]string{LabelInstance: "kro", LabelHelmManagedBy: HelmManagedBy, "other": big},
			Annotations:   map[string]string{AnnotationHelmReleaseName: "kro", AnnotationHelmReleaseNamespace: "kro-system", "kubectl.kubernetes.io/last-applied-configuration": big},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "helm"}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(2)),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kro", Args: []string{big}}}}},
		},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 1, AvailableReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Message: big},
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse, Reason: "MinimumReplicasUnavailable", Message: big},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable", Message: "done"},
			}},
	}
	out, err := TrimDeployment(in)
	g.Expect(err).NotTo(HaveOccurred())
	d := out.(*appsv1.Deployment)
	g.Expect(d.Labels).To(Equal(map[string]string{LabelInstance: "kro", LabelHelmManagedBy: HelmManagedBy}))
	g.Expect(d.Annotations).To(Equal(map[string]string{AnnotationHelmReleaseName: "kro", AnnotationHelmReleaseNamespace: "kro-system"}))
	g.Expect(d.ManagedFields).To(BeNil())
	g.Expect(d.Spec.Template.Spec.Containers).To(BeEmpty())
	g.Expect(*d.Spec.Replicas).To(BeEquivalentTo(2))
	g.Expect([]any{d.Name, d.Namespace, d.Generation, d.ResourceVersion, d.Status.ObservedGeneration, d.Status.UpdatedReplicas, d.Status.AvailableReplicas}).
		To(Equal([]any{"kro", "kro-system", int64(3), "7", int64(3), int32(2), int32(1)}))
	g.Expect(d.Status.Conditions).To(HaveLen(2))
	g.Expect(d.Status.Conditions[0].Type).To(Equal(appsv1.DeploymentAvailable))
	g.Expect(d.Status.Conditions[0].Message).To(HaveLen(maxConditionMessage))
	g.Expect(d.Status.Conditions[1].Message).To(Equal("done"))

	tombstone := "not a Deployment"
	g.Expect(TrimDeployment(tombstone)).To(Equal(tombstone))
}
