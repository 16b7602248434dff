package guard

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// TestJudgeKroDeployment: only the Deployment kro's Helm release made counts; it is
// available with a replica available, not when scaled to 0, gone, or without one; a
// rollout is done only once every replica is updated and available.
func TestJudgeKroDeployment(t *testing.T) {
	g := NewWithT(t)
	site := KroDeployment{Namespace: "kro-system", Release: "kro", Where: "the ControlPlane"}
	kro := testenv.AvailableKroDeployment()
	g.Expect(madeByRelease(kro, site)).To(BeTrue())
	forged := testenv.AvailableKroDeployment()
	forged.Annotations = nil
	g.Expect(madeByRelease(forged, site)).To(BeFalse(), "the chart's labels without Helm's marks")
	other := testenv.AvailableReleaseDeployment("kro-system", "other")
	g.Expect(madeByRelease(other, site)).To(BeFalse(), "another release")

	st := judgeDeployments([]*appsv1.Deployment{kro}, site)
	g.Expect([]any{st.Available, st.Done}).To(Equal([]any{true, true}))
	g.Expect(st.Message).To(Equal("kro runs in namespace kro-system on the ControlPlane: Deployment kro-system/kro has 2 of 2 replicas available"))

	st = judgeDeployments(nil, site)
	g.Expect([]any{st.Available, st.Done}).To(Equal([]any{false, false}))
	g.Expect(st.Message).To(HavePrefix("kro's Deployment is missing: no Deployment of Helm release kro in namespace kro-system on the ControlPlane"))

	scaled := testenv.AvailableKroDeployment()
	scaled.Spec.Replicas = ptr.To(int32(0))
	scaled.Status.AvailableReplicas = 0
	st = judgeDeployments([]*appsv1.Deployment{scaled}, site)
	g.Expect(st.Available).To(BeFalse())
	g.Expect(st.Message).To(ContainSubstring("Deployment kro-system/kro is scaled to 0 replicas"))

	rolling := testenv.AvailableKroDeployment()
	rolling.Status.UpdatedReplicas, rolling.Status.AvailableReplicas = 1, 1
	st = judgeDeployments([]*appsv1.Deployment{rolling}, site)
	g.Expect([]any{st.Available, st.Done}).To(Equal([]any{true, false}), "available while it rolls, not done")
	g.Expect(st.Rollout).To(Equal("Deployment kro-system/kro: 1 of 2 replicas updated, 1 available"))

	down := testenv.AvailableKroDeployment()
	down.Status.AvailableReplicas = 0
	down.Status.Conditions[0].Status, down.Status.Conditions[0].Message = "False", "Deployment does not have minimum availability."
	down.DeletionTimestamp = nil
	st = judgeDeployments([]*appsv1.Deployment{down}, site)
	g.Expect(st.Message).To(ContainSubstring("has none of its 2 replicas available (Deployment does not have minimum availability)"))

	down.DeletionTimestamp = ptr.To(metav1.Now())
	g.Expect(judgeDeployments([]*appsv1.Deployment{down}, site).Message).To(ContainSubstring("is being deleted"))
}
