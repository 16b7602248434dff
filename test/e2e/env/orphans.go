package env

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
)

// The checker of the fault suite: what a Kro leaves behind once it is gone.

// What on a ControlPlane belongs to kro and its tenants, apart from the provider's labels.
const (
	// HelmReleaseSecretPrefix starts the names of the Helm storage secrets of kro's
	// release in controllers.KroNamespace ("sh.helm.release.v1.kro.v1", ...).
	HelmReleaseSecretPrefix = "sh.helm.release.v1." + owned.ReleaseName + "."
	// KroOwnedLabel marks the CRDs kro generated for ResourceGraphDefinitions.
	KroOwnedLabel = "kro.run/owned"
)

const (
	// The provider's labels, and Helm's marks on what a release installed.
	labelManagedBySelector = v1alpha1.LabelManagedBy + "=" + v1alpha1.ManagedByValue
	helmManagedBySelector  = v1alpha1.LabelManagedBy + "=Helm"
	helmReleaseName        = "meta.helm.sh/release-name"
	helmReleaseNamespace   = "meta.helm.sh/release-namespace"
	// kro's release lives in kro's namespace.
	kroHelmReleaseNamespace = owned.KroNamespace

	rgdGroup, rgdVersion, rgdResource = "kro.run", "v1alpha1", "resourcegraphdefinitions"

	leftoverListTimeout = 10 * time.Second
	platformClusterName = "platform"
)

// Leftover is one object found on a cluster after a Kro has gone.
type Leftover struct {
	// Cluster is "platform" or the ControlPlane's name.
	Cluster string
	// Resource is the object's resource, e.g. "secrets" or "helmreleases.helm.toolkit.fluxcd.io".
	Resource, Namespace, Name string
	// Why says why it counts.
	Why string
}

func (l Leftover) String() string {
	name := l.Name
	if l.Namespace != "" {
		name = l.Namespace + "/" + l.Name
	}
	return fmt.Sprintf("%s: %s %s (%s)", l.Cluster, l.Resource, name, l.Why)
}

// Leftovers is what the checker found.
type Leftovers struct {
	// Orphaned is what should be gone with the Kro: on the platform cluster every object
	// carrying the provider's labels for the Kro; on its ControlPlane every object
	// carrying the provider's labels, kro's Helm release (its storage secrets and what
	// it installed), ResourceGraphDefinitions and instances of the CRDs kro generated.
	Orphaned []Leftover
	// Kept is what stays by design: the CRDs kro generated (kro runs with
	// --allow-crd-deletion=false), kro's own CRDs (Helm never deletes CRDs), and
	// dependents of what Helm installed (a ReplicaSet of kro's Deployment) that the
	// garbage collector has not removed yet.
	Kept []Leftover
	// Deleting counts the Orphaned of the platform cluster that were still being deleted
	// (a deletion timestamp, a finalizer left) when CheckLeftovers stopped waiting.
	Deleting int
	// ControlPlaneChecked is false when the ControlPlane was not looked at (it is gone for
	// good).
	ControlPlaneChecked bool
}

// Names lists the orphaned objects for a message.
func (l Leftovers) Names() string {
	parts := make([]string, 0, len(l.Orphaned))
	for _, o := range l.Orphaned {
		parts = append(parts, o.String())
	}
	return strings.Join(parts, "; ")
}

// deletingGrace is how long CheckLeftovers waits for objects that are being deleted.
const deletingGrace = 30 * time.Second

// CheckLeftovers lists what the Kros of the ControlPlanes cps (each Kro has its
// ControlPlane's name and namespace) left behind on the platform cluster and, with
// checkControlPlanes, on the ControlPlanes (several at once). It fails while one of the
// Kros still exists: only a Kro that is gone can leave orphans.
func (e *Env) CheckLeftovers(ctx context.Context, checkControlPlanes bool, cps ...*ControlPlane) (Leftovers, error) {
	var out Leftovers
	kros := map[string]bool{}
	for _, cp := range cps {
		kro := &v1alpha1.Kro{}
		switch err := e.Onboarding.Client.Get(ctx, client.ObjectKey{Namespace: cp.Namespace, Name: cp.Name}, kro); {
		case err == nil:
			return out, fmt.Errorf("the Kro %s/%s still exists (phase %s)", cp.Namespace, cp.Name, kro.Status.Phase)
		case !apierrors.IsNotFound(err):
			return out, err
		}
		kros[cp.Namespace+"/"+cp.Name] = true
	}

	// The platform cluster: whatever carries the provider's labels for these Kros. An
	// object the provider deleted may still wait for its own controller's finalizer (the
	// OCIRepository for source-controller's clean-up of its artifact, seconds on a busy
	// machine): it is on its way out, and only one still there after deletingGrace is
	// counted as orphaned.
	deadline := time.Now().Add(deletingGrace)
	for {
		labelled, err := listLabelled(ctx, e.Platform.Config, labelManagedBySelector)
		if err != nil {
			return out, fmt.Errorf("platform cluster: %w", err)
		}
		out.Orphaned, out.Deleting = nil, 0
		for _, o := range labelled {
			if kros[o.meta.Annotations[v1alpha1.AnnotationKro]] ||
				kros[o.meta.Labels[v1alpha1.LabelKroNamespace]+"/"+o.meta.Labels[v1alpha1.LabelKroName]] {
				out.Orphaned = append(out.Orphaned, o.leftover(platformClusterName, "carries the provider's labels for the Kro"))
				if o.meta.DeletionTimestamp != nil {
					out.Deleting++
				}
			}
		}
		if out.Deleting == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	if !checkControlPlanes {
		return out, nil
	}
	out.ControlPlaneChecked = true
	results := make([]Leftovers, len(cps))
	errs := make([]error, len(cps))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, cp := range cps {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = controlPlaneLeftovers(ctx, cp)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("ControlPlane %s: %w", cp.Name, errs[i])
			}
		})
	}
	wg.Wait()
	for _, r := range results {
		out.Orphaned = append(out.Orphaned, r.Orphaned...)
		out.Kept = append(out.Kept, r.Kept...)
	}
	return out, errors.Join(errs...)
}

func controlPlaneLeftovers(ctx context.Context, cp *ControlPlane) (Leftovers, error) {
	var out Leftovers
	// Everything the provider labelled (a ControlPlane serves one Kro).
	labelled, err := listLabelled(ctx, cp.Config, labelManagedBySelector)
	if err != nil {
		return out, err
	}
	for _, o := range labelled {
		out.Orphaned = append(out.Orphaned, o.leftover(cp.Name, "carries the provider's labels"))
	}
	md, err := metadataClient(cp.Config)
	if err != nil {
		return out, err
	}
	for _, check := range []func(context.Context, *ControlPlane, metadata.Interface, *Leftovers) error{
		helmReleaseLeftovers, rgdLeftovers, generatedKindLeftovers,
	} {
		if err := check(ctx, cp, md, &out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// helmReleaseLeftovers adds kro's Helm release: its storage secrets and what it installed.
func helmReleaseLeftovers(ctx context.Context, cp *ControlPlane, md metadata.Interface, out *Leftovers) error {
	helm, err := listLabelled(ctx, cp.Config, helmManagedBySelector)
	if err != nil {
		return err
	}
	for _, o := range helm {
		if o.meta.Annotations[helmReleaseName] != owned.ReleaseName || o.meta.Annotations[helmReleaseNamespace] != kroHelmReleaseNamespace {
			continue
		}
		if refs := o.meta.OwnerReferences; len(refs) > 0 {
			// Dependents copy their owner's annotations (a Deployment's ReplicaSet does):
			// the garbage collector removes them with their owner, not Helm.
			out.Kept = append(out.Kept, o.leftover(cp.Name, fmt.Sprintf("owned by %s %s, removed by the garbage collector", refs[0].Kind, refs[0].Name)))
			continue
		}
		out.Orphaned = append(out.Orphaned, o.leftover(cp.Name, "installed by kro's Helm release"))
	}
	secrets, err := md.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace(kroHelmReleaseNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing secrets in %s: %w", kroHelmReleaseNamespace, err)
	}
	for _, s := range secrets.Items {
		if strings.HasPrefix(s.Name, HelmReleaseSecretPrefix) {
			out.Orphaned = append(out.Orphaned, Leftover{Cluster: cp.Name, Resource: "secrets", Namespace: s.Namespace, Name: s.Name, Why: "kro's Helm release"})
		}
	}
	return nil
}

// rgdLeftovers adds the ResourceGraphDefinitions.
func rgdLeftovers(ctx context.Context, cp *ControlPlane, md metadata.Interface, out *Leftovers) error {
	rgds, err := md.Resource(schema.GroupVersionResource{Group: rgdGroup, Version: rgdVersion, Resource: rgdResource}).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err): // kro's CRD is not there
		return nil
	case err != nil:
		return fmt.Errorf("listing ResourceGraphDefinitions: %w", err)
	}
	for _, r := range rgds.Items {
		out.Orphaned = append(out.Orphaned, Leftover{Cluster: cp.Name, Resource: rgdResource + "." + rgdGroup, Name: r.Name, Why: "a ResourceGraphDefinition"})
	}
	return nil
}

// generatedKindLeftovers adds the instances of the CRDs kro generated; those CRDs and
// kro's own are kept.
func generatedKindLeftovers(ctx context.Context, cp *ControlPlane, md metadata.Interface, out *Leftovers) error {
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := cp.Client.List(ctx, &crds); err != nil {
		return fmt.Errorf("listing CRDs: %w", err)
	}
	for i := range crds.Items {
		crd := &crds.Items[i]
		switch {
		case crd.Labels[KroOwnedLabel] == "true":
			out.Kept = append(out.Kept, Leftover{Cluster: cp.Name, Resource: "customresourcedefinitions", Name: crd.Name, Why: "generated by kro, kept (--allow-crd-deletion=false)"})
			version := servedVersion(crd)
			if version == "" {
				continue
			}
			gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Spec.Names.Plural}
			list, err := md.Resource(gvr).List(ctx, metav1.ListOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("listing %s: %w", crd.Name, err)
			}
			for _, o := range list.Items {
				out.Orphaned = append(out.Orphaned, Leftover{Cluster: cp.Name, Resource: crd.Name, Namespace: o.Namespace, Name: o.Name,
					Why: "an instance of " + crd.Spec.Names.Kind + ", a kind kro generated"})
			}
		case crd.Spec.Group == rgdGroup || strings.HasSuffix(crd.Spec.Group, "."+rgdGroup):
			out.Kept = append(out.Kept, Leftover{Cluster: cp.Name, Resource: "customresourcedefinitions", Name: crd.Name, Why: "kro's own CRD, kept by Helm"})
		}
	}
	return nil
}

// servedVersion is a CRD's storage version if it is served, else any served one.
func servedVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	version := ""
	for _, v := range crd.Spec.Versions {
		if v.Served && (version == "" || v.Storage) {
			version = v.Name
		}
	}
	return version
}

// found is an object listed through the metadata API, with its resource.
type found struct {
	resource string
	meta     metav1.PartialObjectMetadata
}

func (f found) leftover(cluster, why string) Leftover {
	return Leftover{Cluster: cluster, Resource: f.resource, Namespace: f.meta.Namespace, Name: f.meta.Name, Why: why}
}

func metadataClient(cfg *rest.Config) (metadata.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = leftoverListTimeout
	cfg.WarningHandler = rest.NoWarnings{} // deprecated kinds are listed too
	cfg.QPS, cfg.Burst = 200, 400
	return metadata.NewForConfig(cfg)
}

// listLabelled lists the objects of every resource the cluster serves that match a label
// selector, in all namespaces.
func listLabelled(ctx context.Context, cfg *rest.Config, selector string) ([]found, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = leftoverListTimeout
	cfg.WarningHandler = rest.NoWarnings{}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	md, err := metadataClient(cfg)
	if err != nil {
		return nil, err
	}
	var out []found
	var errs []error
	for _, l := range discovery.FilteredBy(discovery.SupportsAllVerbs{Verbs: []string{"list"}}, lists) {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return nil, err
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") {
				continue
			}
			list, err := md.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("listing %s: %w", r.Name, err))
				continue
			}
			resource := r.Name
			if gv.Group != "" {
				resource += "." + gv.Group
			}
			for _, o := range list.Items {
				out = append(out, found{resource: resource, meta: o})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].resource != out[j].resource {
			return out[i].resource < out[j].resource
		}
		return out[i].meta.Namespace+"/"+out[i].meta.Name < out[j].meta.Namespace+"/"+out[j].meta.Name
	})
	return out, errors.Join(errs...)
}
