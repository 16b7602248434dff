package clusters

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// KroCRD is the Kro CRD on the onboarding cluster. Every environment that serves the
// onboarding cluster needs it, so it carries the claim (v1alpha1.AnnotationEnvironment)
// that lets only one of them do so.
const KroCRD = "kroes.kro.services.open-control-plane.io"

// claimResync is how often the claim watch looks at its cached copy of the CRD again,
// so that a claim that could not be written at once is retried; it costs no request.
const claimResync = time.Minute

// ClaimError says that another environment holds the onboarding cluster: two
// environments would both act on every Kro, and the one without the Kro's ControlPlane
// would count it as gone and remove the finalizer the other one's deletion waits on.
type ClaimError struct {
	// Holder is the environment named in the claim.
	Holder string
	// Environment is this provider's environment.
	Environment string
}

func (e *ClaimError) Error() string {
	return fmt.Sprintf("environment %q cannot serve this onboarding cluster: environment %q serves it "+
		"(annotation %s=%s on CRD %s), and two environments on one onboarding cluster would both act on every Kro. "+
		"If environment %q no longer serves this onboarding cluster (its provider is stopped or points elsewhere), "+
		"release the claim with `kubectl annotate crd %s %s-` and start this provider again",
		e.Environment, e.Holder, v1alpha1.AnnotationEnvironment, e.Holder, KroCRD,
		e.Holder, KroCRD, v1alpha1.AnnotationEnvironment)
}

// Claim makes sure that the onboarding cluster is served by environment: it reads the
// Kro CRD and, when no environment holds it yet, writes environment into its claim
// annotation under optimistic locking, so that of two environments claiming at once
// only one succeeds. It reports whether it wrote the claim, and returns a *ClaimError
// when another environment holds it, and the API's NotFound when the CRD is missing.
// The claim is a merge patch of its own, apart from the CRD's server-side apply, which
// therefore never removes it.
func Claim(ctx context.Context, c client.Client, environment string) (claimed bool, err error) {
	if environment == "" {
		return false, fmt.Errorf("claiming the onboarding cluster: no environment given")
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: KroCRD}, crd); err != nil {
			return err
		}
		claimed, err = claimCRD(ctx, c, crd, environment)
		return err
	})
	var held *ClaimError
	if errors.As(err, &held) {
		return false, held
	}
	if err != nil {
		return false, fmt.Errorf("claiming CRD %s for environment %q: %w", KroCRD, environment, err)
	}
	return claimed, nil
}

// claimCRD claims crd, as read at its resourceVersion, for environment.
func claimCRD(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition, environment string) (bool, error) {
	switch holder := crd.Annotations[v1alpha1.AnnotationEnvironment]; holder {
	case environment:
		return false, nil
	case "":
		patch := client.MergeFromWithOptions(crd.DeepCopy(), client.MergeFromWithOptimisticLock{})
		metav1.SetMetaDataAnnotation(&crd.ObjectMeta, v1alpha1.AnnotationEnvironment, environment)
		return true, c.Patch(ctx, crd, patch, FieldOwner)
	default:
		return false, &ClaimError{Holder: holder, Environment: environment}
	}
}

// WatchClaim follows the Kro CRD on the onboarding cluster until ctx ends, so that a
// running provider notices when its claim changes: a claim that was removed is written
// again (the provider still serves the cluster), and a claim taken by another
// environment calls lost, after which WatchClaim returns. It watches that one object
// only, so that it makes no requests while nothing changes.
func WatchClaim(ctx context.Context, onboarding *rest.Config, environment string, log logr.Logger, lost func(*ClaimError)) error {
	c, err := client.New(onboarding, client.Options{Scheme: Scheme})
	if err != nil {
		return err
	}
	resync := claimResync
	crds, err := cache.New(onboarding, cache.Options{Scheme: Scheme, SyncPeriod: &resync, ByObject: map[client.Object]cache.ByObject{
		&apiextensionsv1.CustomResourceDefinition{}: {Field: fields.OneTermEqualSelector("metadata.name", KroCRD)},
	}})
	if err != nil {
		return err
	}
	inf, err := crds.GetInformer(ctx, &apiextensionsv1.CustomResourceDefinition{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	check := func(obj any) {
		crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
		if !ok || ctx.Err() != nil || crd.Annotations[v1alpha1.AnnotationEnvironment] == environment {
			return
		}
		if err := recheckClaim(ctx, c, environment, log); err != nil {
			lost(err)
			cancel()
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    check,
		UpdateFunc: func(_, obj any) { check(obj) },
	}); err != nil {
		return err
	}
	return crds.Start(ctx)
}

// recheckClaim claims the onboarding cluster again for a running provider whose cached
// CRD no longer names its environment. It returns the *ClaimError of another holder;
// any other failure is logged and left to the next resync.
func recheckClaim(ctx context.Context, c client.Client, environment string, log logr.Logger) *ClaimError {
	claimed, err := Claim(ctx, c, environment)
	var held *ClaimError
	if errors.As(err, &held) {
		return held
	}
	switch {
	case err != nil:
		log.Error(err, "could not claim the onboarding cluster again; retrying at the next resync", "resync", claimResync)
	case claimed:
		log.Info("the claim on the onboarding cluster was removed while this provider serves it; claimed it again",
			"crd", KroCRD, "annotation", v1alpha1.AnnotationEnvironment, "environment", environment)
	}
	return nil
}
