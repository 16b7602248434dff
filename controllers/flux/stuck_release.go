package flux

import (
	"fmt"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

// helm-controller can leave a HelmRelease reporting an action in flight for good
// although the action ended and the release is deployed: when the status patch after an
// install is not seen back in its cache ("failed to wait for object to sync in-cache
// after patching", as after an outage of the platform's API server), the history
// records the release deployed but Released is missing, and every later reconcile finds
// the release in sync and leaves Ready=Unknown ("Running 'install' action ...") as it is.
// fluxcd/helm-controller#1409 fixed this for a Released condition that says the action
// failed, not for a missing one (v1.6.4). The workaround its reporter names is a forced
// reconcile (`flux reconcile helmrelease --force`): with reconcile.fluxcd.io/forceAt
// equal to reconcile.fluxcd.io/requestedAt, helm-controller upgrades the release once,
// and the upgrade sets Released and Ready.
//
// The provider asks for it itself, once per stuck episode: when Ready has been Unknown
// with reason Progressing for longer than an action may last (the release's timeout,
// after which Helm gives up its wait, and stuckReleaseMargin), while the newest release
// in the history is deployed with the chart the Kro asks for. The request's value names
// the moment Ready turned Unknown, so the same episode is asked about once, and
// helm-controller handles it once (status.lastHandledForceAt). A forced upgrade of a
// release that is in sync changes nothing that runs: Helm writes a new revision with the
// same objects.

// StuckReleasePrefix starts the provider's force requests.
const StuckReleasePrefix = "stuck-release/"

// stuckReleaseMargin is how long after its timeout an action that is still reported in
// flight counts as stuck: the time helm-controller takes to record the action's end.
const stuckReleaseMargin = 30 * time.Second

// maxFluxQuote bounds what the request's report quotes of helm-controller's status.
const maxFluxQuote = 160

// releaseTimeout is the HelmRelease's timeout for each action.
func releaseTimeout(hr *helmv2.HelmRelease) time.Duration {
	if hr.Spec.Timeout != nil && hr.Spec.Timeout.Duration > 0 {
		return hr.Spec.Timeout.Duration
	}
	return 5 * time.Minute // helm-controller's default
}

// ForceStuckRelease asks, in desired, helm-controller for a forced upgrade of a
// HelmRelease that it left reporting an action in flight although the release is deployed
// with the wanted chart, and keeps a request the provider made before. current is the
// HelmRelease as it is, or nil. It returns what it asked for, when it asks anew ("" when
// not), and when the release counts as stuck if it does not yet (zero otherwise), for the
// caller to look again then.
func ForceStuckRelease(desired, current client.Object, wanted string, now time.Time) (string, time.Time) {
	hr, ok := current.(*helmv2.HelmRelease)
	if !ok || hr == nil {
		return "", time.Time{}
	}
	request := hr.GetAnnotations()[meta.ReconcileRequestAnnotation]
	if !strings.HasPrefix(request, StuckReleasePrefix) || hr.GetAnnotations()[meta.ForceRequestAnnotation] != request {
		request = "" // none, or someone else's: not the provider's to keep
	}
	asked := ""
	ready := apimeta.FindStatusCondition(hr.Status.Conditions, v1alpha1.ConditionReady)
	if ready != nil && ready.Status == metav1.ConditionUnknown && ready.Reason == meta.ProgressingReason && deployedHead(hr, wanted) {
		since := ready.LastTransitionTime.Time
		stuckAt := since.Add(releaseTimeout(hr) + stuckReleaseMargin)
		if now.Before(stuckAt) {
			keepRequest(desired, request)
			return "", stuckAt
		}
		if episode := StuckReleasePrefix + since.UTC().Format(time.RFC3339); request != episode {
			request = episode
			asked = fmt.Sprintf("helm-controller reports %q since %s, yet revision %d is deployed with chart %s: "+
				"a forced upgrade was requested (%s=%s, fluxcd/helm-controller#1409)",
				foreign.Line(ready.Message, maxFluxQuote), since.UTC().Format(time.RFC3339), hr.Status.History[0].Version,
				foreign.Line(hr.Status.History[0].ChartVersion, maxFluxQuote),
				meta.ForceRequestAnnotation, request)
		}
	}
	keepRequest(desired, request)
	return asked, time.Time{}
}

// deployedHead tells whether the newest release in the HelmRelease's history is deployed
// with the wanted chart.
func deployedHead(hr *helmv2.HelmRelease, wanted string) bool {
	if len(hr.Status.History) == 0 || hr.Status.History[0] == nil {
		return false
	}
	head := hr.Status.History[0]
	return head.Status == "deployed" && SameChart(head.ChartVersion, wanted)
}

// keepRequest puts the provider's force request, if any, on desired.
func keepRequest(desired client.Object, request string) {
	if request == "" {
		return
	}
	annotations := desired.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[meta.ReconcileRequestAnnotation] = request
	annotations[meta.ForceRequestAnnotation] = request
	desired.SetAnnotations(annotations)
}
