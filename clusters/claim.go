package clusters

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

// KroCRD is the Kro CRD on the onboarding cluster. Every installation that serves the
// onboarding cluster needs it, so it carries the claim (v1alpha1.AnnotationEnvironment)
// that lets only one of them do so.
const KroCRD = "kroes.kro.services.open-control-plane.io"

// claimResync is how often the claim watch looks at its cached copy of the CRD again,
// so that a claim that could not be written at once is retried; it costs no request.
const claimResync = time.Minute

// Installation tells one installation of the provider from another. The environment
// alone does not: every standalone installation is "standalone", and two platform
// clusters can run environments of one name. The platform cluster's identity (the UID
// of its kube-system namespace, which lives as long as the cluster) and the provider's
// name complete it. The replicas of one installation share all three, and so share
// the claim.
type Installation struct {
	// Environment is --environment, or "standalone".
	Environment string
	// Provider is --provider-name.
	Provider string
	// Platform is the UID of the platform cluster's kube-system namespace.
	Platform string
}

// claimKey prefixes the claim of an installation; a claim without it was written by a
// version that named the environment only.
const claimKey = "environment="

// Claim is the installation's value of the claim annotation.
func (i Installation) Claim() string {
	return claimKey + i.Environment + ",provider=" + i.Provider + ",platform=" + i.Platform
}

// earlier tells a claim written by an earlier version, which names the environment only.
func (i Installation) earlier() bool { return i.Provider == "" && i.Platform == "" }

// String names the installation in messages.
func (i Installation) String() string {
	if i.earlier() {
		return fmt.Sprintf("environment %q (a claim by an earlier version, which names the environment only)", i.Environment)
	}
	return fmt.Sprintf("environment %q of provider %q on the platform cluster whose kube-system namespace has UID %s",
		i.Environment, i.Provider, i.Platform)
}

// maxClaim bounds the claim value a message repeats: anyone with kubectl can write it.
const maxClaim = 256

// parseClaim reads the claim annotation's value: an installation's claim, or the bare
// environment an earlier version wrote.
func parseClaim(v string) Installation {
	v = foreign.Text(v, maxClaim)
	rest, ok := strings.CutPrefix(v, claimKey)
	if !ok {
		return Installation{Environment: v}
	}
	var i Installation
	if at := strings.LastIndex(rest, ",platform="); at >= 0 {
		rest, i.Platform = rest[:at], rest[at+len(",platform="):]
	}
	if at := strings.LastIndex(rest, ",provider="); at >= 0 {
		rest, i.Provider = rest[:at], rest[at+len(",provider="):]
	}
	i.Environment = rest
	// A claim in this format that lacks a part was written by hand: not an earlier
	// version's, and "?" in messages for what it lacks.
	if i.Provider == "" {
		i.Provider = "?"
	}
	if i.Platform == "" {
		i.Platform = "?"
	}
	return i
}

// PlatformIdentity is the identity of the platform cluster: the UID of its kube-system
// namespace.
func PlatformIdentity(ctx context.Context, platform client.Reader) (string, error) {
	ns := &corev1.Namespace{}
	if err := platform.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, ns); err != nil {
		return "", fmt.Errorf("reading the platform cluster's identity (the UID of namespace %s): %w", metav1.NamespaceSystem, err)
	}
	return string(ns.UID), nil
}

// ClaimError says that another installation holds the onboarding cluster: two
// installations would both act on every Kro, and the one without the Kro's ControlPlane
// would count it as gone and remove the finalizer the other one's deletion waits on.
type ClaimError struct {
	// Holder is the installation named in the claim.
	Holder Installation
	// Self is this provider's installation.
	Self Installation
	// claim is the claim annotation's value as found.
	claim string
}

func (e *ClaimError) Error() string {
	claim := foreign.Text(e.claim, maxClaim)
	return fmt.Sprintf("installation %s cannot serve this onboarding cluster: installation %s serves it "+
		"(annotation %s=%s on CRD %s), and two installations on one onboarding cluster would both act on every Kro. "+
		"If that installation no longer serves this onboarding cluster (its provider is stopped or points elsewhere), "+
		"release the claim with `kubectl annotate crd %s %s-` and start this provider again",
		e.Self, e.Holder, v1alpha1.AnnotationEnvironment, claim, KroCRD, KroCRD, v1alpha1.AnnotationEnvironment)
}

// Claimed says what Claim did.
type Claimed int

const (
	// ClaimHeld says that the installation held the claim already; nothing was written.
	ClaimHeld Claimed = iota
	// ClaimWritten says that no installation held it, and the installation wrote its claim.
	ClaimWritten
	// ClaimTakenOver says that an earlier version's claim of the same environment (it names the
	// environment only) was replaced by the installation's claim. That earlier claim may
	// be this installation's, before an upgrade, or another installation's of the same
	// environment name, which cannot be told apart: a provider of the earlier version
	// that still runs finds the claim changed and stops.
	ClaimTakenOver
)

// Claim makes sure that the onboarding cluster is served by self: it reads the Kro CRD
// and, when no installation holds it yet (or an earlier version's claim names self's
// environment), writes self's claim into its annotation under optimistic locking, so
// that of two installations claiming at once only one succeeds. It returns a
// *ClaimError when another installation holds it, and the API's NotFound when the CRD
// is missing. The claim is a merge patch of its own, apart from the CRD's server-side
// apply, which therefore never removes it.
func Claim(ctx context.Context, c client.Client, self Installation) (claimed Claimed, err error) {
	if self.Environment == "" || self.Provider == "" || self.Platform == "" {
		return ClaimHeld, fmt.Errorf("claiming the onboarding cluster: incomplete installation %+v", self)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: KroCRD}, crd); err != nil {
			return err
		}
		claimed, err = claimCRD(ctx, c, crd, self)
		return err
	})
	var held *ClaimError
	if errors.As(err, &held) {
		return ClaimHeld, held
	}
	if err != nil {
		return ClaimHeld, fmt.Errorf("claiming CRD %s for environment %q: %w", KroCRD, self.Environment, err)
	}
	return claimed, nil
}

// claimCRD claims crd, as read at its resourceVersion, for self.
func claimCRD(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition, self Installation) (Claimed, error) {
	value := crd.Annotations[v1alpha1.AnnotationEnvironment]
	holder := parseClaim(value)
	claimed := ClaimWritten
	switch {
	case value == self.Claim():
		return ClaimHeld, nil
	case value == "":
	case holder.earlier() && holder.Environment == self.Environment:
		claimed = ClaimTakenOver
	default:
		return ClaimHeld, &ClaimError{Holder: holder, Self: self, claim: value}
	}
	patch := client.MergeFromWithOptions(crd.DeepCopy(), client.MergeFromWithOptimisticLock{})
	metav1.SetMetaDataAnnotation(&crd.ObjectMeta, v1alpha1.AnnotationEnvironment, self.Claim())
	return claimed, c.Patch(ctx, crd, patch, FieldOwner)
}

// WatchClaim follows the Kro CRD on the onboarding cluster until ctx ends, so that a
// running provider notices when its claim changes: a claim that was removed is written
// again (the provider still serves the cluster), and a claim taken by another
// environment calls lost, after which WatchClaim returns. It watches that one object
// only, so that it makes no requests while nothing changes.
func WatchClaim(ctx context.Context, onboarding *rest.Config, self Installation, log logr.Logger, lost func(*ClaimError)) error {
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
		if !ok || ctx.Err() != nil || crd.Annotations[v1alpha1.AnnotationEnvironment] == self.Claim() {
			return
		}
		if err := recheckClaim(ctx, c, self, log); err != nil {
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
// CRD no longer names its installation. It returns the *ClaimError of another holder;
// any other failure is logged and left to the next resync.
func recheckClaim(ctx context.Context, c client.Client, self Installation, log logr.Logger) *ClaimError {
	claimed, err := Claim(ctx, c, self)
	var held *ClaimError
	if errors.As(err, &held) {
		return held
	}
	switch {
	case err != nil:
		log.Error(err, "could not claim the onboarding cluster again; retrying at the next resync", "resync", claimResync)
	case claimed == ClaimWritten:
		log.Info("the claim on the onboarding cluster was removed while this provider serves it; claimed it again",
			"crd", KroCRD, "annotation", v1alpha1.AnnotationEnvironment, "claim", self.Claim())
	case claimed == ClaimTakenOver:
		log.Info("an earlier version claimed the onboarding cluster for this environment while this provider serves it; took the claim over",
			"crd", KroCRD, "annotation", v1alpha1.AnnotationEnvironment, "claim", self.Claim())
	}
	return nil
}
