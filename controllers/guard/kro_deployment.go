package guard

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/providers/controlplane"
)

// kro's own Deployment, as the Kro's KroAvailable condition and a rollout's gate read it.
// Both read the engaged cluster's cache of where kro runs, which holds only the
// Deployments with the release's labels, trimmed (controlplane.WatchDeployments), and
// is watched: a change brings the Kro back at once. Of those, only the ones Helm made
// for the release count: a tenant administers its ControlPlane and can make Deployments
// with any labels, but Helm marks the objects of a release with its name and namespace
// and refuses to take over one marked for another, so a Deployment that carries the
// marks of kro's release is one the release owns. A tenant's own Deployment, however
// broken, neither makes kro unavailable nor holds a rollout up.

// maxDeploymentsNamed bounds the Deployments a message names.
const maxDeploymentsNamed = 3

// KroDeploymentState is what the cache says of kro's Deployment.
type KroDeploymentState struct {
	// Available: every Deployment of the release has replicas, and at least one of them
	// available.
	Available bool
	// Message says so, or what is wrong, for the KroAvailable condition.
	Message string
	// Done: every Deployment of the release has finished rolling out its current spec
	// (RolloutHealth.DeploymentAvailable); Rollout says how far it is.
	Done    bool
	Rollout string
}

// ReadKroDeployment reads kro's Deployments where kro runs from the cluster's cache.
func ReadKroDeployment(ctx context.Context, site KroDeployment) (KroDeploymentState, error) {
	list := &appsv1.DeploymentList{}
	if err := site.Cluster.GetCache().List(ctx, list, client.InNamespace(site.Namespace),
		client.MatchingLabels{controlplane.LabelInstance: site.Release, controlplane.LabelHelmManagedBy: controlplane.HelmManagedBy}); err != nil {
		return KroDeploymentState{}, fmt.Errorf("listing kro's Deployments in %s on %s: %w", site.Namespace, site.Where, err)
	}
	var ours []*appsv1.Deployment
	for i := range list.Items {
		if madeByRelease(&list.Items[i], site) {
			ours = append(ours, &list.Items[i])
		}
	}
	return judgeDeployments(ours, site), nil
}

// madeByRelease: Helm made the Deployment for kro's release.
func madeByRelease(d *appsv1.Deployment, site KroDeployment) bool {
	a := d.Annotations
	return d.Labels[controlplane.LabelHelmManagedBy] == controlplane.HelmManagedBy &&
		a[controlplane.AnnotationHelmReleaseName] == site.Release && a[controlplane.AnnotationHelmReleaseNamespace] == site.Namespace
}

// judgeDeployments judges the Deployments of kro's release, in name order (the cache
// lists them so).
func judgeDeployments(ds []*appsv1.Deployment, site KroDeployment) KroDeploymentState {
	if len(ds) == 0 {
		msg := fmt.Sprintf("kro's Deployment is missing: no Deployment of Helm release %s in namespace %s on %s; Flux's drift detection puts it back at the HelmRelease's next reconcile (spec.interval)",
			site.Release, site.Namespace, site.Where)
		return KroDeploymentState{Message: msg, Rollout: fmt.Sprintf("no Deployment of release %s in %s on %s", site.Release, site.Namespace, site.Where)}
	}
	st := KroDeploymentState{Available: true, Done: true}
	var down, up []string
	for _, d := range ds {
		if ok, why := deploymentAvailable(d); ok {
			up = append(up, why)
		} else {
			st.Available = false
			down = append(down, why)
		}
		done, msg := deploymentDone(d)
		st.Done = st.Done && done
		if !done || st.Rollout == "" {
			st.Rollout = foreign.Text(msg, foreign.StatusMessageMax)
		}
	}
	if st.Available {
		st.Message = fmt.Sprintf("kro runs in namespace %s on %s: %s", site.Namespace, site.Where, foreign.JoinFew(up, maxDeploymentsNamed, "; "))
	} else {
		st.Message = fmt.Sprintf("kro is not available in namespace %s on %s: %s; Flux's drift detection restores the Deployment's spec at the HelmRelease's next reconcile (spec.interval), see the Deployment's events for pods that do not start",
			site.Namespace, site.Where, foreign.JoinFew(down, maxDeploymentsNamed, "; "))
	}
	st.Message = foreign.Text(st.Message, foreign.StatusMessageMax)
	return st
}

// deploymentAvailable tells whether a Deployment runs at least one available replica
// of what it is asked to run; the text names it and says so, or why not.
func deploymentAvailable(d *appsv1.Deployment) (bool, string) {
	name := "Deployment " + d.Namespace + "/" + d.Name
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	switch {
	case !d.DeletionTimestamp.IsZero():
		return false, name + " is being deleted"
	case want == 0:
		return false, name + " is scaled to 0 replicas"
	case s.AvailableReplicas == 0:
		return false, fmt.Sprintf("%s has none of its %d replicas available%s", name, want, availableReason(d))
	}
	return true, fmt.Sprintf("%s has %d of %d replicas available", name, s.AvailableReplicas, want)
}

// availableReason is the Deployment controller's word on availability, when it gave one.
func availableReason(d *appsv1.Deployment) string {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status != corev1.ConditionTrue && c.Message != "" {
			return " (" + foreign.Line(strings.TrimSuffix(c.Message, "."), 200) + ")"
		}
	}
	return ""
}

// deploymentDone tells whether a Deployment has finished rolling out its current spec:
// the controller saw the spec, and every replica is updated and available.
func deploymentDone(d *appsv1.Deployment) (bool, string) {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	msg := fmt.Sprintf("Deployment %s/%s: %d of %d replicas updated, %d available", d.Namespace, d.Name, s.UpdatedReplicas, want, s.AvailableReplicas)
	switch {
	case s.ObservedGeneration < d.Generation:
		return false, fmt.Sprintf("Deployment %s/%s: generation %d not yet observed", d.Namespace, d.Name, d.Generation)
	case s.UpdatedReplicas < want || s.AvailableReplicas < want:
		return false, msg
	}
	return true, msg
}
