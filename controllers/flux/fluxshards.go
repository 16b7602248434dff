package flux

import (
	"fmt"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
	"github.com/openmcp-project/service-provider-kro/providers/sharding"
)

// Flux's own sharding (spec.fluxShards): each Kro's OCIRepository and HelmRelease carry
// Flux's label sharding.fluxcd.io/key, so that one source-controller and helm-controller
// pair per key reconciles them, and neither Flux controller is the ceiling at many
// ControlPlanes. The key is the rendezvous owner of the Kro's ControlPlane among the keys
// (providers/sharding, the hash the provider's own replicas share work by): adding a key
// moves only about 1/n of the Kros to it, removing one moves only its own. A moved Kro's
// objects change only their label; the new shard's helm-controller finds the release
// installed as the HelmRelease's status records it, and does not install it again.
//
// A move goes source first. The OCIRepository is relabelled with a reconcile request
// (Flux's reconcile.fluxcd.io/requestedAt, "shard-move/<key>/<time>"), and the
// HelmRelease keeps its old key until the new shard's source-controller has handled that
// request (status.lastHandledReconcileAt) and has an artifact: a helm-controller of the
// new shard that saw the HelmRelease first would find the source without an artifact of
// its own and wait out its dependency requeue (30 s), with the Kro not Ready meanwhile.
// Each shard's source-controller keeps artifacts in a storage of its own, and one that
// does not hold the advertised artifact clears it ("disappeared from storage") before it
// fetches the chart again; when that fetch fails, the request is handled all the same
// (source-controller records it at the end of every reconcile), with no artifact.

// ShardMovePrefix starts the reconcile request of a move to key.
func ShardMovePrefix(key string) string { return "shard-move/" + key + "/" }

// MoveSourceShard asks, in desired, the source's new shard to reconcile it when its
// key changes, and keeps a request made before (so that it is handled even when the
// new shard comes up later). current is the OCIRepository as it is, or nil.
func MoveSourceShard(desired, current client.Object, key string, now time.Time) {
	if current == nil {
		return
	}
	request := current.GetAnnotations()[meta.ReconcileRequestAnnotation]
	if current.GetLabels()[v1alpha1.LabelFluxShard] != key {
		request = ShardMovePrefix(key) + now.UTC().Format(time.RFC3339Nano)
	}
	if !strings.HasPrefix(request, "shard-move/") {
		return // someone else's request: not the provider's to keep
	}
	annotations := desired.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[meta.ReconcileRequestAnnotation] = request
	desired.SetAnnotations(annotations)
}

// HoldReleaseShard keeps, in desired, the HelmRelease on its current shard until the
// source's new shard has handled the move (moveSourceShard) and the current shard's
// helm-controller has no release operation in flight (releaseBusy). current is the
// HelmRelease as it is, or nil. It returns what a held move waits for ("" when the
// HelmRelease moves or stays where it belongs) and, for a wait on helm-controller, when
// that wait ends at the latest (zero otherwise).
func HoldReleaseShard(desired, current client.Object, repo *sourcev1.OCIRepository, key string, now time.Time) (string, time.Time) {
	if current == nil || repo == nil {
		return "", time.Time{}
	}
	was := current.GetLabels()[v1alpha1.LabelFluxShard]
	if was == key {
		return "", time.Time{}
	}
	wait, until := "", time.Time{}
	if hr, ok := current.(*helmv2.HelmRelease); ok {
		wait, until = ReleaseBusy(hr, now)
	}
	if wait == "" && !strings.HasPrefix(repo.Status.LastHandledReconcileAt, ShardMovePrefix(key)) {
		wait = "the source's new shard to handle the move of the OCIRepository"
	}
	if wait == "" && repo.Status.Artifact == nil {
		wait = "the source's new shard to store the chart (its fetch has not succeeded yet)"
	}
	if wait == "" {
		return "", time.Time{}
	}
	labels := desired.GetLabels()
	if was == "" {
		delete(labels, v1alpha1.LabelFluxShard)
	} else {
		labels[v1alpha1.LabelFluxShard] = was
	}
	return wait, until
}

// A HelmRelease's release operation must end on the shard that began it: Helm locks the
// release while an install, upgrade, test, rollback or uninstall runs (the release is
// pending-*), and a helm-controller that finds a release locked unlocks it (marks it
// failed) and acts again, so a new shard's helm-controller that saw the HelmRelease in
// the middle of the old shard's upgrade would fail that upgrade under it. helm-controller
// sets Reconciling=True with reason Progressing ("Running 'upgrade' action ...") and
// writes it before each action begins, and removes it, or turns its reason to
// ProgressingWithRetry, once the action has ended; a pending-* release at the head of the
// history is one whose action never reported its end. A shard move waits for neither
// to be there. The wait is bounded, in case the old shard's controllers are gone and
// nobody ends it: an operation takes at most a few timeouts of the release (an action,
// its test and a remediation), so past shardMoveStaleAfter the move goes on, and the new
// shard's helm-controller unlocks a release that its dead owner left locked.

// ShardMoveStaleAfter is how long a move waits for a release operation, given the
// HelmRelease's timeout for each action.
func ShardMoveStaleAfter(hr *helmv2.HelmRelease) time.Duration {
	timeout := 5 * time.Minute // helm-controller's default
	if hr.Spec.Timeout != nil && hr.Spec.Timeout.Duration > 0 {
		timeout = hr.Spec.Timeout.Duration
	}
	return 3*timeout + time.Minute
}

// ReleaseBusy says what release operation helm-controller has in flight for hr ("" for
// none), and until when a move waits for it.
func ReleaseBusy(hr *helmv2.HelmRelease, now time.Time) (string, time.Time) {
	stale := ShardMoveStaleAfter(hr)
	if c := apimeta.FindStatusCondition(hr.Status.Conditions, meta.ReconcilingCondition); c != nil &&
		c.Status == metav1.ConditionTrue && c.Reason == meta.ProgressingReason {
		if until := c.LastTransitionTime.Add(stale); now.Before(until) {
			return "helm-controller to end the release operation in flight (Reconciling=True, Progressing, since " +
				c.LastTransitionTime.UTC().Format(time.RFC3339) + ")", until
		}
	}
	if len(hr.Status.History) > 0 && hr.Status.History[0] != nil && strings.HasPrefix(hr.Status.History[0].Status, "pending-") {
		head := hr.Status.History[0]
		if until := head.LastDeployed.Add(stale); now.Before(until) {
			return fmt.Sprintf("helm-controller to end the release operation in flight (revision %d is %s since %s)",
				head.Version, foreign.Text(head.Status, maxHelmStatus), head.LastDeployed.UTC().Format(time.RFC3339)), until
		}
	}
	return "", time.Time{}
}

// maxHelmStatus bounds a Helm release status in a message: Helm's statuses are short
// words, anything longer is cut.
const maxHelmStatus = 32

// ShardWaitMessage is the report of a held move, added to the HelmRelease's entry in the
// Kro's managedResources.
func ShardWaitMessage(key, wait string) string {
	to := "the unsharded Flux controllers"
	if key != "" {
		to = "Flux shard " + key
	}
	return shardWaitPrefix + to + " waits for " + wait
}

// WithoutShardWait is a HelmRelease's message without the report of a held move, which a
// message the Kro's status kept from an earlier reconcile (previousReading) may carry.
func WithoutShardWait(message string) string {
	if !strings.HasPrefix(message, shardWaitPrefix) {
		return message
	}
	_, rest, _ := strings.Cut(message, "; ")
	return rest
}

// shardWaitPrefix starts every shardWaitMessage.
const shardWaitPrefix = "the move to "

// ShardOf is the Flux shard key of a Kro's Flux objects; "" without shards.
func ShardOf(kro client.Object, shards []string) string {
	if len(shards) == 0 {
		return ""
	}
	return sharding.Owner(kro.GetNamespace()+"/"+kro.GetName(), shards)
}

// LabelFluxShard puts the shard key on a Flux object; without a key there is no label,
// and server-side apply removes one the provider set before.
func LabelFluxShard(o client.Object, shard string) {
	if shard == "" {
		return
	}
	labels := o.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[v1alpha1.LabelFluxShard] = shard
	o.SetLabels(labels)
}

// ShardCounts counts the Kros on each shard, in the order of the keys; nil without
// shards.
func ShardCounts(shards []string, kros []v1alpha1.Kro) []v1alpha1.FluxShardStatus {
	if len(shards) == 0 {
		return nil
	}
	out := make([]v1alpha1.FluxShardStatus, len(shards))
	at := make(map[string]int, len(shards))
	for i, k := range shards {
		out[i].Key, at[k] = k, i
	}
	for i := range kros {
		out[at[ShardOf(&kros[i], shards)]].Kros++
	}
	return out
}

// reportShardWait adds a held move to the HelmRelease's entry in the Kro's status, and
// emits a Normal event when the Kro's status did not report it yet.
func (r *Applier) reportShardWait(s *step.Scope, entry *v1alpha1.ManagedResource, wait string) {
	reported := false
	if s.Before != nil {
		for _, m := range s.Before.ManagedResources {
			if m.Kind == entry.Kind && m.Cluster == entry.Cluster && strings.Contains(m.Message, wait) {
				reported = true
			}
		}
	}
	if entry.Message == "" {
		entry.Message = wait
	} else {
		entry.Message = step.ShortenMessage(wait + "; " + entry.Message)
	}
	if !reported {
		r.Recorder.Eventf(s.Kro, nil, corev1.EventTypeNormal, v1alpha1.ReasonFluxShardMoveWaiting, "MoveShard", "HelmRelease %s/%s: %s",
			entry.Namespace, entry.Name, wait)
	}
}
