package controlplane

import (
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
)

// Helm's marks on the objects of a release: it sets them on every object it installs.
const (
	// LabelHelmManagedBy is set to HelmManagedBy by Helm (and by charts, as kro's does).
	LabelHelmManagedBy = "app.kubernetes.io/managed-by"
	// HelmManagedBy is LabelHelmManagedBy's value on a Helm release's objects.
	HelmManagedBy = "Helm"
	// AnnotationHelmReleaseName and AnnotationHelmReleaseNamespace name the release that
	// owns an object; Helm refuses to touch an object whose annotations name another.
	AnnotationHelmReleaseName      = "meta.helm.sh/release-name"
	AnnotationHelmReleaseNamespace = "meta.helm.sh/release-namespace"
	// LabelInstance is the chart's label with the release's name.
	LabelInstance = "app.kubernetes.io/instance"
)

// maxConditionMessage bounds a cached Deployment condition's message: the Deployment
// controller writes short ones, anyone else with write access whatever they like.
const maxConditionMessage = 512

// WatchDeployments adds the Deployments of a Helm release in namespace to an engaged
// cluster's cache (after ClusterOptions, which sets the cache's objects): those with the
// release's instance label and Helm's managed-by label, trimmed to what the provider
// judges them by (TrimDeployment). Events watches them once the cache has them: kro's
// Deployment going or losing its replicas brings the Kro back at once. Deployments exist
// on every cluster, so the watch cannot fail an engagement for a missing kind.
func WatchDeployments(namespace, release string) cluster.Option {
	return func(o *cluster.Options) {
		if o.Cache.ByObject == nil {
			o.Cache.ByObject = map[client.Object]cache.ByObject{}
		}
		o.Cache.ByObject[&appsv1.Deployment{}] = cache.ByObject{
			Namespaces: map[string]cache.Config{namespace: {}},
			Label:      labels.SelectorFromSet(labels.Set{LabelInstance: release, LabelHelmManagedBy: HelmManagedBy}),
			Transform:  TrimDeployment,
		}
	}
}

// TrimDeployment keeps of a Deployment what the provider reads (guard.ReadKroDeployment):
// its name, Helm's labels and annotations, generation, replicas and rollout status.
// The pod template, which can weigh up to the object's limit, and managed fields go.
// A tenant that administers its ControlPlane can make as many Deployments with the
// release's labels as it likes; each costs the provider a few hundred bytes.
func TrimDeployment(in any) (any, error) {
	d, ok := in.(*appsv1.Deployment)
	if !ok {
		return in, nil // a tombstone, say
	}
	out := &appsv1.Deployment{
		TypeMeta: d.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: d.Name, Namespace: d.Namespace, UID: d.UID, ResourceVersion: d.ResourceVersion,
			Generation: d.Generation, DeletionTimestamp: d.DeletionTimestamp,
			Labels:      keep(d.Labels, LabelInstance, LabelHelmManagedBy),
			Annotations: keep(d.Annotations, AnnotationHelmReleaseName, AnnotationHelmReleaseNamespace),
		},
		Spec: appsv1.DeploymentSpec{Replicas: d.Spec.Replicas},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: d.Status.ObservedGeneration, Replicas: d.Status.Replicas, UpdatedReplicas: d.Status.UpdatedReplicas,
			ReadyReplicas: d.Status.ReadyReplicas, AvailableReplicas: d.Status.AvailableReplicas,
		},
	}
	for _, c := range d.Status.Conditions {
		if c.Type != appsv1.DeploymentAvailable && c.Type != appsv1.DeploymentProgressing {
			continue
		}
		if len(c.Message) > maxConditionMessage {
			c.Message = c.Message[:maxConditionMessage]
		}
		if len(c.Reason) > maxConditionMessage {
			c.Reason = c.Reason[:maxConditionMessage]
		}
		out.Status.Conditions = append(out.Status.Conditions, appsv1.DeploymentCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
		if len(out.Status.Conditions) == 2 {
			break
		}
	}
	return out, nil
}

// keep copies the given keys of m, nil when none is there.
func keep(m map[string]string, keys ...string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		}
	}
	return out
}
