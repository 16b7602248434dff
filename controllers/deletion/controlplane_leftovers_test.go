package deletion

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// TestAwaitControlPlane: the decision of a deletion with kro uninstalled about a
// ControlPlane it cannot reach. The tests in controllers/ play it on real API servers;
// this table covers the cases they do not reach.
func TestAwaitControlPlane(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	grace := 5 * time.Minute
	sa := v1alpha1.ManagedResource{Cluster: owned.ControlPlaneCluster, APIVersion: "v1", Kind: "ServiceAccount", Namespace: "kro-system", Name: "kro", Ready: metav1.ConditionTrue}
	onPlatform := v1alpha1.ManagedResource{Cluster: "platform", APIVersion: "v1", Kind: "Secret", Namespace: "t", Name: "copy"}
	unreachable := &reach.NotAvailableError{Reason: v1alpha1.ReasonControlPlaneUnreachable, Message: "the ControlPlane does not answer"}
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(d)); return &t }

	for _, tc := range []struct {
		name         string
		managed      []v1alpha1.ManagedResource
		na           *reach.NotAvailableError
		missingSince *metav1.Time // status.accessMissingSince
		since        *metav1.Time // status.controlPlaneUnreachableSince
		want         step.Result
		wantEvent    bool
		wantSince    *metav1.Time
	}{
		{name: "nothing known on the ControlPlane", managed: []v1alpha1.ManagedResource{onPlatform}, na: unreachable, want: step.Proceed},
		{name: "gone for good", managed: []v1alpha1.ManagedResource{sa}, na: &reach.NotAvailableError{Gone: true, Message: "gone"}, want: step.Proceed},
		{name: "first found unreachable", managed: []v1alpha1.ManagedResource{sa}, na: unreachable, want: step.Waiting, wantSince: at(0)},
		{name: "unreachable within the grace period", managed: []v1alpha1.ManagedResource{sa}, na: unreachable, since: at(-grace + time.Second), want: step.Waiting, wantSince: at(-grace + time.Second)},
		{name: "unreachable for the grace period", managed: []v1alpha1.ManagedResource{sa}, na: unreachable, since: at(-grace), want: step.Proceed, wantEvent: true},
		{name: "missing for the grace period", managed: []v1alpha1.ManagedResource{sa}, na: &reach.NotAvailableError{Missing: true, Message: "no kubeconfig"}, missingSince: at(-grace), want: step.Proceed, wantEvent: true},
		{name: "missing within it", managed: []v1alpha1.ManagedResource{sa}, na: &reach.NotAvailableError{Missing: true, Message: "no kubeconfig"}, missingSince: at(-time.Minute), want: step.Waiting},
		// Under load a client's error grows (rate limiter, the attempt before): the cause is
		// shortened in its middle, and the message still ends by saying what happens next.
		{name: "unreachable with a long cause", managed: []v1alpha1.ManagedResource{sa}, na: &reach.NotAvailableError{Reason: v1alpha1.ReasonControlPlaneUnreachable, Message: "client rate limiter Wait returned an error: context deadline exceeded - error from a previous attempt: " + strings.Repeat("read tcp 127.0.0.1:37144->127.0.0.1:45127: read: connection reset by peer; ", 8)}, want: step.Waiting, wantSince: at(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: "project-a", Name: "cp-1"}}
			kro.Status.ManagedResources = tc.managed
			kro.Status.ControlPlaneUnreachableSince = tc.since
			s := step.NewScope(kro)
			s.Obs.AccessMissingSince = tc.missingSince
			rec := events.NewFakeRecorder(4)
			r := &Remover{Clients: step.Clients{Recorder: rec, ProviderName: "kro"}, AccessGracePeriod: grace}

			g.Expect(r.awaitControlPlane(s, tc.na, now)).To(Equal(tc.want))
			g.Expect(s.Obs.UnreachableSince).To(Equal(tc.wantSince))
			blocked := step.FindCondition(s.Obs.Conditions, v1alpha1.ConditionDeletionBlocked)
			if tc.want == step.Waiting {
				g.Expect(blocked).NotTo(BeNil())
				g.Expect(blocked.Status).To(Equal(metav1.ConditionTrue))
				g.Expect(blocked.Reason).To(Equal(tc.na.ConditionReason()))
				g.Expect(blocked.Message).To(ContainSubstring("ControlPlane project-a/cp-1 cannot be reached"))
				g.Expect(blocked.Message).To(ContainSubstring("ServiceAccount kro-system/kro"))
				g.Expect(blocked.Message).To(ContainSubstring("the deletion goes on when it answers again, or leaves them at "))
				g.Expect(blocked.Message).To(HaveSuffix(" and names them in an event"))
				g.Expect(len(blocked.Message)).To(BeNumerically("<=", step.MaxMessage))
				g.Expect(blocked.Message).To(ContainSubstring(tc.na.Message[:min(30, len(tc.na.Message))]), "the cause keeps its start")
				g.Expect(s.Obs.Managed).To(ConsistOf(HaveField("Ready", metav1.ConditionUnknown)), "still to be removed, as last seen")
			} else {
				g.Expect(blocked).To(BeNil())
				g.Expect(s.Obs.Managed).To(BeEmpty(), "a deletion that goes on keeps no record of the ControlPlane")
			}
			if tc.wantEvent {
				g.Expect(rec.Events).To(Receive(And(
					HavePrefix("Warning "+v1alpha1.ReasonControlPlaneLeftovers),
					ContainSubstring("ServiceAccount kro-system/kro"),
					ContainSubstring(v1alpha1.LabelKroNamespace+"=project-a"))))
			}
			g.Expect(rec.Events).NotTo(Receive())
		})
	}
}
