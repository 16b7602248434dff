package testenv

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RecordRelease plays helm-controller's bookkeeping of a release of the chart with the
// given OCI tag, for tests that play Flux: the chart version is the tag with the
// artifact's digest as build metadata (as helm-controller records an OCI chart), set as
// the last attempted revision; a successful release (deployed) becomes the head of the
// history and supersedes the one before. The provider reads what is installed from it.
func RecordRelease(hr *helmv2.HelmRelease, tag string, deployed bool) {
	digest := fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(tag)))
	chartVersion := strings.ReplaceAll(tag, "_", "+") + "+" + digest[len("sha256:"):len("sha256:")+12]
	hr.Status.LastAttemptedRevision = chartVersion
	hr.Status.LastAttemptedRevisionDigest = digest
	if !deployed {
		return
	}
	if latest := hr.Status.History.Latest(); latest != nil && latest.Status == "deployed" && latest.ChartVersion == chartVersion {
		return
	}
	for _, snap := range hr.Status.History {
		if snap.Status == "deployed" {
			snap.Status = "superseded"
		}
	}
	version := 1
	if latest := hr.Status.History.Latest(); latest != nil {
		version = latest.Version + 1
	}
	now := metav1.Now()
	snap := &helmv2.Snapshot{
		Name: "kro", Namespace: "kro-system", Version: version, Status: "deployed",
		ChartName: "kro", ChartVersion: chartVersion, OCIDigest: digest,
		Digest: digest, ConfigDigest: digest, FirstDeployed: now, LastDeployed: now,
	}
	hr.Status.History = append(helmv2.Snapshots{snap}, hr.Status.History...)
	if len(hr.Status.History) > 5 {
		hr.Status.History = hr.Status.History[:5]
	}
}

// PlayFluxReady sets the Ready condition of a Flux object (an OCIRepository or a
// HelmRelease) through its status subresource, as source- and helm-controller do, for
// the generation it has now. A HelmRelease also gets its release recorded: the tag of
// its OCIRepository as the last attempted revision and, when Ready, as the deployed head
// of the history (RecordRelease). One attempt; callers retry on a conflict.
func PlayFluxReady(ctx context.Context, c client.Client, obj client.Object, status metav1.ConditionStatus, message string) error {
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return err
	}
	cond := metav1.Condition{Type: "Ready", Status: status, Reason: "Succeeded", Message: message, ObservedGeneration: obj.GetGeneration()}
	if status != metav1.ConditionTrue {
		cond.Reason = "Failed"
	}
	switch o := obj.(type) {
	case *sourcev1.OCIRepository:
		o.Status.ObservedGeneration = o.Generation
		meta.SetStatusCondition(&o.Status.Conditions, cond)
	case *helmv2.HelmRelease:
		o.Status.ObservedGeneration = o.Generation
		meta.SetStatusCondition(&o.Status.Conditions, cond)
		repo := &sourcev1.OCIRepository{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Spec.ChartRef.Name}, repo); err != nil {
			return fmt.Errorf("reading the HelmRelease's OCIRepository: %w", err)
		}
		RecordRelease(o, repo.Spec.Reference.Tag, status == metav1.ConditionTrue)
	default:
		return fmt.Errorf("%T is not a Flux object this plays", obj)
	}
	return c.Status().Update(ctx, obj)
}
