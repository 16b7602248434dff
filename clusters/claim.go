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
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

// KroCRD is the Kro CRD on the onboarding cluster. Every installation that serves the
// onboarding cluster needs it, so it carries the claim (v1alpha1.AnnotationEnvironment)
// that lets only one of them do so.
const KroCRD = "kroes.kro.services.open-control-plane.io"

// claimResync is how often the claim watch looks at its cached copy of the CRD again,
// so that a claim that could not be written at once is retried; it costs no request.
const claimResync = time.Minute

// ClaimError says that another installation holds the onboarding cluster: two
// installations would both act on every Kro, and the one without the Kro's ControlPlane
// would count it as gone and remove the finalizer the other one's deletion waits on.
type ClaimError struct {
	// Holder is the installation named in the claim.
	Holder Installation
	// Self is this provider's installation.
	Self Installation
	// Hint says more about why the claim is not self's, or is empty.
	Hint string
	// claim is the claim annotation's value as found.
	claim string
}

func (e *ClaimError) Error() string {
	claim := foreign.Text(e.claim, maxClaim)
	return fmt.Sprintf("installation %s cannot serve this onboarding cluster: installation %s serves it "+
		"(annotation %s=%s on CRD %s), and two installations on one onboarding cluster would both act on every Kro. %s"+
		"If that installation no longer serves this onboarding cluster (its provider is stopped or points elsewhere), "+
		"release the claim with `kubectl annotate crd %s %s-` and start this provider again",
		e.Self, e.Holder, v1alpha1.AnnotationEnvironment, claim, KroCRD, e.Hint, KroCRD, v1alpha1.AnnotationEnvironment)
}

// Claimed says what Claim did.
type Claimed int

const (
	// ClaimHeld says that the installation held the claim already; nothing was written.
	ClaimHeld Claimed = iota
	// ClaimWritten says that no installation held it, and the installation wrote its claim.
	ClaimWritten
	// ClaimRewritten says that the installation's own claim of the previous format,
	// which named no namespace (same environment, provider and platform cluster), was
	// rewritten with its namespace.
	ClaimRewritten
	// ClaimTakenOver says that an earlier version's claim of the same environment (it
	// names the environment only) was replaced by the installation's claim, because
	// the platform cluster shows that the installation ran there before (Claimant.Trace).
	// A provider of the earlier version that still runs finds the claim changed and stops.
	ClaimTakenOver
)

// Claim makes sure that the onboarding cluster is served by self: it reads the Kro CRD
// and, when no installation holds it yet (or self's own claim of an earlier format
// does, see judge), writes self's claim into its annotation under optimistic locking,
// so that of two installations claiming at once only one succeeds. It returns a
// *ClaimError when another installation holds it, and the API's NotFound when the CRD
// is missing. The claim is a merge patch of its own, apart from the CRD's server-side
// apply, which therefore never removes it.
func Claim(ctx context.Context, c client.Client, self Claimant) (claimed Claimed, err error) {
	if self.Environment == "" || self.Provider == "" || self.Platform == "" {
		return ClaimHeld, fmt.Errorf("claiming the onboarding cluster: incomplete installation %+v", self.Installation)
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

// CheckClaim says what Claim would do, without writing: the Claimed it would return,
// or the *ClaimError of another holder, or the API's NotFound when the CRD is missing.
func CheckClaim(ctx context.Context, c client.Reader, self Claimant) (Claimed, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: KroCRD}, crd); err != nil {
		return ClaimHeld, err
	}
	claimed, refused := judge(crd.Annotations[v1alpha1.AnnotationEnvironment], self)
	if refused != nil {
		return ClaimHeld, refused
	}
	return claimed, nil
}

// claimCRD claims crd, as read at its resourceVersion, for self.
func claimCRD(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition, self Claimant) (Claimed, error) {
	claimed, refused := judge(crd.Annotations[v1alpha1.AnnotationEnvironment], self)
	if refused != nil {
		return ClaimHeld, refused
	}
	if claimed == ClaimHeld {
		return ClaimHeld, nil
	}
	patch := client.MergeFromWithOptions(crd.DeepCopy(), client.MergeFromWithOptimisticLock{})
	metav1.SetMetaDataAnnotation(&crd.ObjectMeta, v1alpha1.AnnotationEnvironment, self.Claim())
	return claimed, c.Patch(ctx, crd, patch, FieldOwner)
}

// judge decides what self does with the claim value found: keep it (ClaimHeld, nothing
// to write), write its own claim (the other results), or refuse.
//   - The same installation's claim of the previous format, which names no namespace,
//     is self's own: rewritten with the namespace. Two installations in two namespaces
//     of one platform cluster shared it; the first to claim keeps it.
//   - An installation whose namespace is unknown (init without --pod-namespace) accepts
//     the claim of its environment, provider and platform cluster in any namespace and
//     writes nothing: it cannot tell, and only run, which knows its namespace, acts on Kros.
//   - An earlier version's bare claim of self's environment names no platform cluster.
//     It is self's only when self's platform cluster shows that self ran there before
//     (Claimant.Trace); otherwise it may be an installation of another platform cluster,
//     whose running provider a take-over would stop.
func judge(value string, self Claimant) (Claimed, *ClaimError) {
	if value == "" {
		return ClaimWritten, nil
	}
	if value == self.Claim() {
		return ClaimHeld, nil
	}
	holder := ParseClaim(value)
	refuse := func(hint string) *ClaimError {
		return &ClaimError{Holder: holder, Self: self.Installation, Hint: hint, claim: value}
	}
	switch {
	case holder.earlier():
		if holder.Environment != self.Environment {
			return ClaimHeld, refuse("")
		}
		if self.Trace == "" {
			return ClaimHeld, refuse(bareHint(self.Installation))
		}
		return ClaimTakenOver, nil
	case !holder.samePlatform(self.Installation) || holder.Namespace == self.Namespace:
		return ClaimHeld, refuse("")
	case holder.Namespace == "":
		return ClaimRewritten, nil
	case self.Namespace == "":
		return ClaimHeld, nil
	default:
		return ClaimHeld, refuse("")
	}
}

// bareHint explains why an earlier version's bare claim of self's environment is not
// taken over.
func bareHint(self Installation) string {
	where := "give the provider's namespace (--pod-namespace), where its Leases are, so that it can look"
	if self.Namespace != "" {
		where = fmt.Sprintf("no Lease %s or %s-<shard> of this provider is in namespace %s on this platform cluster",
			LeaseName(self.Provider), LeaseName(self.Provider), self.Namespace)
	}
	return fmt.Sprintf("That claim, by an earlier version, names the environment only, not the platform cluster it came from, and nothing shows "+
		"that this installation wrote it (%s): it may be an installation on another platform cluster. ", where)
}

// WatchClaim follows the Kro CRD on the onboarding cluster until ctx ends, so that a
// running provider notices when its claim changes: a claim that was removed is written
// again (the provider still serves the cluster), and a claim taken by another
// environment calls lost, after which WatchClaim returns. It watches that one object
// only, so that it makes no requests while nothing changes.
func WatchClaim(ctx context.Context, onboarding *rest.Config, self Claimant, log logr.Logger, lost func(*ClaimError)) error {
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
func recheckClaim(ctx context.Context, c client.Client, self Claimant, log logr.Logger) *ClaimError {
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
	case claimed == ClaimRewritten:
		log.Info("this installation's claim of the previous format, without its namespace, appeared while this provider serves the cluster; rewrote it with the namespace",
			"crd", KroCRD, "annotation", v1alpha1.AnnotationEnvironment, "claim", self.Claim())
	case claimed == ClaimTakenOver:
		log.Info("an earlier version claimed the onboarding cluster for this environment while this provider serves it; took the claim over",
			"crd", KroCRD, "annotation", v1alpha1.AnnotationEnvironment, "claim", self.Claim())
	}
	return nil
}
