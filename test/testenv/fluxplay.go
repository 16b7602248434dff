package testenv

import (
	"crypto/sha256"
	"fmt"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
