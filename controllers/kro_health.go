package controllers

import (
	"context"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

// kro's health on a ControlPlane, as a rollout's gate reads it (rollout_health.go): the
// Ready condition of the instances of the kinds kro generated, and kro's Deployment.
//
// Neither is cached: a watch of every generated kind and of Deployments would hold
// every instance of every ControlPlane in memory, all the time, for a gate that matters
// only while a rollout updates the Kro. So the Kro reconciler reads both straight from
// the API server, and only in the reconciles of a Kro that a rollout is updating
// (scope.gate): a ControlPlane outside a rollout costs what it did before. The reads go
// through a dynamic client with the resources spelled out, so that the engaged
// cluster's REST mapper does not discover, and keep, the generated kinds either.

// kroInstanceReady is the condition kro (v0.9.x) sets on an instance.
const kroInstanceReady = "Ready"

// maxNotReadyInstances bounds the instances that are not Ready named in the status.
const maxNotReadyInstances = 5

// readKroHealth reads kro's health on the ControlPlane, for the revision being installed.
// The instances are on the ControlPlane, kro's Deployment where kro runs (site). Those
// created after since (the Kro's admission) are counted apart, in NewInstances.
func readKroHealth(ctx context.Context, cl cluster.Cluster, site kroSite, revision string, since time.Time) (*v1alpha1.RolloutHealth, error) {
	dyn, err := dynamic.NewForConfigAndClient(cl.GetConfig(), cl.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	h := &v1alpha1.RolloutHealth{Revision: revision}
	if err := countInstances(ctx, cl.GetAPIReader(), dyn, h, since); err != nil {
		return nil, err
	}
	if site.cluster != cl {
		if dyn, err = dynamic.NewForConfigAndClient(site.cluster.GetConfig(), site.cluster.GetHTTPClient()); err != nil {
			return nil, err
		}
	}
	if err := deploymentHealth(ctx, dyn, site, h); err != nil {
		return nil, err
	}
	return h, nil
}

// countInstances counts the instances of every kind kro generated and names a few that
// are not Ready, in the order of their kind's resource, namespace and name; those
// created after since are counted apart and not named.
func countInstances(ctx context.Context, reader client.Reader, dyn dynamic.Interface, h *v1alpha1.RolloutHealth, since time.Time) error {
	kinds, err := generatedKinds(ctx, reader)
	if err != nil {
		return err
	}
	for _, k := range kinds {
		list, err := dyn.Resource(k.gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing %s: %w", k.crd.Name, err)
		}
		sort.Slice(list.Items, func(a, b int) bool {
			return client.ObjectKeyFromObject(&list.Items[a]).String() < client.ObjectKeyFromObject(&list.Items[b]).String()
		})
		for j := range list.Items {
			countInstance(h, k.crd.Spec.Names.Kind, &list.Items[j], since)
		}
	}
	return nil
}

// countInstance adds one instance to the counts: to NewInstances when it was created
// after since. Creation times and since are kept to the second; an instance of the
// admission's second counts as old.
func countInstance(h *v1alpha1.RolloutHealth, kind string, u *unstructured.Unstructured, since time.Time) {
	ready, reason := instanceReady(u)
	if u.GetCreationTimestamp().After(since) {
		if h.NewInstances == nil {
			h.NewInstances = &v1alpha1.InstanceCounts{}
		}
		h.NewInstances.Total++
		if ready {
			h.NewInstances.Ready++
		}
		return
	}
	h.Instances.Total++
	if ready {
		h.Instances.Ready++
		return
	}
	if len(h.NotReady) < maxNotReadyInstances {
		h.NotReady = append(h.NotReady, v1alpha1.InstanceState{Kind: kind, Namespace: u.GetNamespace(), Name: u.GetName(), Reason: reason})
	}
}

// instanceReady reads an instance's Ready condition; the reason says why it is not True.
func instanceReady(u *unstructured.Unstructured) (bool, string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != kroInstanceReady {
			continue
		}
		if m["status"] == string(metav1.ConditionTrue) {
			return true, ""
		}
		reason, _ := m["reason"].(string)
		if reason == "" {
			reason, _ = m["status"].(string)
		}
		return false, foreign.Reason(reason, maxStateReason)
	}
	return false, "NoReadyCondition"
}

// deploymentHealth reads the Deployments of kro's release where kro runs (the chart
// labels them with the release's name): each must have finished its rollout.
func deploymentHealth(ctx context.Context, dyn dynamic.Interface, site kroSite, h *v1alpha1.RolloutHealth) error {
	list, err := dyn.Resource(appsv1.SchemeGroupVersion.WithResource("deployments")).Namespace(site.namespace).
		List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + site.release})
	if err != nil {
		return fmt.Errorf("listing kro's Deployments in %s on %s: %w", site.namespace, site.where, err)
	}
	if len(list.Items) == 0 {
		h.Deployment = fmt.Sprintf("no Deployment of release %s in %s on %s", site.release, site.namespace, site.where)
		return nil
	}
	h.DeploymentAvailable = true
	for i := range list.Items {
		d := &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, d); err != nil {
			return fmt.Errorf("reading Deployment %s/%s: %w", site.namespace, list.Items[i].GetName(), err)
		}
		done, msg := deploymentDone(d)
		h.DeploymentAvailable = h.DeploymentAvailable && done
		if !done || h.Deployment == "" {
			h.Deployment = shortenMessage(msg)
		}
	}
	return nil
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
