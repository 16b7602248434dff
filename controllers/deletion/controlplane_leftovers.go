package deletion

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// What the provider leaves on a ControlPlane it cannot reach. Once Flux has uninstalled
// kro, the provider still has objects of its own on the ControlPlane: kro's ServiceAccount
// and RBAC for a workload placement (the ServiceAccount's tokens work for up to 12 h),
// the image pull secret copies in kro-system for a ControlPlane placement. A ControlPlane
// that stops answering at that moment says nothing about whether it comes back, so the
// deletion neither drops them silently nor waits forever: status.managedResources keeps
// them (as last seen) while the deletion waits for the grace period, the same one a
// missing kubeconfig gets; after it an event names each one, to be removed by hand.
// A ControlPlane that is gone for good (under openmcp) takes them with it.

// lookUpAccess is step.LookUpAccess for the phases of a deletion before kro is
// uninstalled, keeping the record of the provider's objects on the ControlPlane
// (accountControlPlane).
func (r *Remover) lookUpAccess(ctx context.Context, s *step.Scope) (*reach.ControlPlaneAccess, *reach.NotAvailableError, error) {
	access, na, err := step.LookUpAccess(ctx, r.ControlPlanes, s)
	if err != nil {
		return nil, nil, err
	}
	if err := r.accountControlPlane(ctx, s, access, na); err != nil {
		return nil, nil, err
	}
	return access, na, nil
}

// accountControlPlane keeps status.managedResources naming the provider's objects on the
// ControlPlane during a deletion: while it answers, kro's ServiceAccount and RBAC of a
// workload placement are read (the inventory reads the image pull secret copies from the
// cache); while it does not, the entries last seen stay, marked as not confirmed.
func (r *Remover) accountControlPlane(ctx context.Context, s *step.Scope, access *reach.ControlPlaneAccess, na *reach.NotAvailableError) error {
	switch {
	case access != nil:
		if s.Kro.Status.Placement != v1alpha1.PlacementWorkloadCluster {
			return nil
		}
		parts, err := r.Placement.Cleanup.KroOnControlPlane(ctx, s, access)
		if err != nil {
			return err
		}
		s.Obs.Managed = append(s.Obs.Managed, parts...)
	case !na.Gone && !na.Connecting:
		s.Obs.Managed = append(s.Obs.Managed, lastSeenOnControlPlane(s.Before)...)
	case na.Connecting:
		// Nothing is known for a moment: the record stays as it was.
		s.Obs.Managed = append(s.Obs.Managed, onControlPlane(s.Before)...)
	}
	return nil
}

// awaitControlPlane decides, once kro is uninstalled, whether the deletion waits for a
// ControlPlane it cannot reach (na) to remove the provider's objects there. It waits
// while the record names any and the grace period runs, and says so in DeletionBlocked;
// when the grace period is over it names them in a Warning event and lets the deletion
// finish. A ControlPlane that is gone for good is not waited for.
func (r *Remover) awaitControlPlane(s *step.Scope, na *reach.NotAvailableError, now time.Time) step.Result {
	left := lastSeenOnControlPlane(s.Before)
	if na.Gone || len(left) == 0 {
		return step.Proceed
	}
	since := r.unreachableSince(s, na, now)
	grace := r.gracePeriod()
	deadline := since.Add(grace)
	controlPlane := fmt.Sprintf("ControlPlane %s/%s", s.Kro.Namespace, s.Kro.Name)
	names := leftoverNames(left)
	if now.Before(deadline) {
		s.Obs.Managed = append(s.Obs.Managed, left...)
		s.Obs.Blocked(na.ConditionReason(), fitCause(na.Message, func(cause string) string {
			return fmt.Sprintf(
				"kro is uninstalled, but %s cannot be reached since %s (%s); %d objects of the provider are still to be removed there: %s; the deletion goes on when it answers again, or leaves them at %s and names them in an event",
				controlPlane, since.UTC().Format(time.RFC3339), cause, len(names), step.ListNames(names), deadline.UTC().Format(time.RFC3339))
		}))
		s.Requeue(deadline.Sub(now))
		return step.Waiting
	}
	s.Obs.UnreachableSince = nil // the wait is over
	r.Recorder.Eventf(s.Kro, nil, corev1.EventTypeWarning, v1alpha1.ReasonControlPlaneLeftovers, "Delete",
		"%s could not be reached for the grace period of %s (since %s: %s); the deletion leaves %d objects of the provider there: %s; all carry the labels %s; delete them on the ControlPlane by hand",
		controlPlane, grace, since.UTC().Format(time.RFC3339), na.Message, len(names), step.ListNames(names), r.leftoverSelector(s))
	return step.Proceed
}

// fitCause returns message(cause) within a status message's length, shortening the cause
// in its middle rather than letting the cut fall on the message's end, which says what
// happens next: a client's error grows under load (rate limiter, retries) and once pushed
// "the deletion goes on when it answers again" off the end.
func fitCause(cause string, message func(string) string) string {
	full := message(cause)
	if over := len(full) - step.MaxMessage; over > 0 {
		return message(foreign.Middle(cause, max(len(cause)-over, minCause)))
	}
	return full
}

// minCause is the least of a cause fitCause keeps.
const minCause = 40

// unreachableSince is when the ControlPlane's access was first found missing
// (status.accessMissingSince) or not working (status.controlPlaneUnreachableSince), or
// now.
func (r *Remover) unreachableSince(s *step.Scope, na *reach.NotAvailableError, now time.Time) time.Time {
	if na.Missing && s.Obs.AccessMissingSince != nil {
		return s.Obs.AccessMissingSince.Time
	}
	if na.Missing {
		return now.Truncate(time.Second)
	}
	since := metav1.NewTime(now.Truncate(time.Second))
	if s.Kro.Status.ControlPlaneUnreachableSince != nil {
		since = *s.Kro.Status.ControlPlaneUnreachableSince.DeepCopy()
	}
	s.Obs.UnreachableSince = &since
	return since.Time
}

// leftoverSelector is the label selector of the provider's objects for the Kro, for an
// operator's kubectl.
func (r *Remover) leftoverSelector(s *step.Scope) string {
	labels := owned.Labels(s.Kro, r.ProviderName, "")
	out := make([]string, 0, len(labels))
	for k, v := range labels {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// onControlPlane are the entries of status.managedResources on the ControlPlane.
func onControlPlane(before *v1alpha1.KroStatus) []v1alpha1.ManagedResource {
	var out []v1alpha1.ManagedResource
	for _, m := range before.ManagedResources {
		if m.Cluster == owned.ControlPlaneCluster {
			out = append(out, m)
		}
	}
	return out
}

// notConfirmed is the message of an entry kept from before while the ControlPlane cannot
// be reached.
const notConfirmed = "as last seen: the ControlPlane cannot be reached"

// lastSeenOnControlPlane are the entries of status.managedResources on the ControlPlane,
// as last seen: their readiness unknown.
func lastSeenOnControlPlane(before *v1alpha1.KroStatus) []v1alpha1.ManagedResource {
	out := onControlPlane(before)
	for i := range out {
		out[i].Ready, out[i].Message = metav1.ConditionUnknown, notConfirmed
	}
	return out
}

// leftoverNames names entries as "Kind namespace/name" (or "Kind name").
func leftoverNames(list []v1alpha1.ManagedResource) []string {
	names := make([]string, 0, len(list))
	for _, m := range list {
		name := m.Name
		if m.Namespace != "" {
			name = m.Namespace + "/" + m.Name
		}
		names = append(names, m.Kind+" "+name)
	}
	return names
}
