package bench

// One change of a version's helmValues, measured: the marker that tells the change's
// HelmReleases apart, the provider's counters before and after, and the wait until every
// Kro runs the new revision.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// rolloutMarker is the helmValues key whose value tells one change from another.
const rolloutMarker = "benchRollout"

func markerValues(nonce string) *apiextensionsv1.JSON {
	return &apiextensionsv1.JSON{Raw: fmt.Appendf(nil, `{%q:%q}`, rolloutMarker, nonce)}
}

// markerOf is the marker in a HelmRelease's values, or "".
func markerOf(hr *helmv2.HelmRelease) string {
	if hr.Spec.Values == nil {
		return ""
	}
	var v map[string]any
	if json.Unmarshal(hr.Spec.Values.Raw, &v) != nil {
		return ""
	}
	s, _ := v[rolloutMarker].(string)
	return s
}

// providerCounts are the provider's requests by cluster and method, and its reconciles.
type providerCounts struct {
	requests                 map[string]float64
	kroReconciles, pcReconci float64
}

func (h *harness) rolloutCounts() (providerCounts, error) {
	s, err := h.scrapeProvider()
	if err != nil {
		return providerCounts{}, err
	}
	roles := map[string]string{hostOf(h.platform.Config.Host): "platform", hostOf(h.onboarding.Config.Host): "onboarding"}
	for _, c := range h.shared {
		roles[hostOf(c.Config.Host)] = "controlplane"
	}
	if h.workload != nil {
		roles[hostOf(h.workload.Config.Host)] = "workload"
	}
	return providerCounts{
		requests: SumBy(s, "rest_client_requests_total", func(l map[string]string) (string, bool) {
			role, ok := roles[l["host"]]
			if !ok {
				role = "other"
			}
			return role + " " + l["method"], true
		}),
		kroReconciles: Sum(s, "controller_runtime_reconcile_total", kroController),
		pcReconci: Sum(s, "controller_runtime_reconcile_total", func(l map[string]string) bool {
			return l["controller"] == "providerconfig"
		}),
	}, nil
}

// hostOf is a rest.Config's host as client-go's metrics name it: host and port.
func hostOf(host string) string {
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		return u.Host
	}
	return strings.TrimSuffix(host, "/")
}

// rollout changes version's helmValues under policy (already in place) and measures
// until every Kro of refs runs the new revision and the provider has settled. The Kros of
// pre (by name) are unavailable before the change and stay so: they only get the
// revision.
func (h *harness) rollout(ctx context.Context, rec *rolloutRecorder, name, version string, refs []*kroRef, pre map[string]bool, policy *v1alpha1.RolloutPolicy, all int) (RolloutRun, error) {
	r := RolloutRun{Name: name, Policy: "none", Version: version, Kros: len(refs)}
	if policy != nil && policy.MaxUnavailable != nil {
		r.Policy = "maxUnavailable: " + policy.MaxUnavailable.String()
		l, err := intstr.GetScaledValueFromIntOrPercent(policy.MaxUnavailable, len(refs), false)
		if err != nil {
			return r, err
		}
		r.Limit = max(l, 1)
	}
	h.logf("rollout %s: changing the helmValues of %s (%d Kros)", name, version, len(refs))
	before, err := h.rolloutCounts()
	if err != nil {
		return r, err
	}
	counted := time.Now()
	apiBefore, err := h.apiserverWrites(ctx)
	if err != nil {
		return r, err
	}
	upgradesBefore, cpuBefore := h.upgradesPlayed(), readCPU()
	oldRev, err := h.versionRevision(ctx, version)
	if err != nil {
		return r, err
	}
	nonce := fmt.Sprintf("%s-%d", strings.ReplaceAll(name, " ", "-"), time.Now().UnixNano())
	h.tr.startCounting()
	rec.begin(version, nonce, oldRev)
	start, err := h.updateProviderConfig(ctx, func(pc *v1alpha1.ProviderConfig) {
		for i := range pc.Spec.Versions {
			if pc.Spec.Versions[i].Version == version {
				pc.Spec.Versions[i].HelmValues = markerValues(nonce)
			}
		}
	})
	if err != nil {
		return r, err
	}
	limit := waitTimeout
	if policy != nil {
		// The Kros unavailable before take places of maxUnavailable.
		limit += time.Duration(math.Ceil(float64(len(refs))/float64(max(r.Limit-len(pre), 1)))) * (h.helmUpgrade + 10*time.Second)
	}
	if err := waitRolledOut(ctx, rec, version, refs, pre, limit); err != nil {
		return r, err
	}
	if _, err := h.waitSettled(ctx, all, 0); err != nil {
		return r, err
	}
	// Let the last status writes of the rollout come in.
	if err := sleep(ctx, time.Second); err != nil {
		return r, err
	}
	rec.end()
	snap := rec.snapshot()
	changes, _, notReady := h.tr.stopCounting()
	after, err := h.rolloutCounts()
	if err != nil {
		return r, err
	}
	r.WindowSeconds = round3(time.Since(counted).Seconds())
	apiAfter, err := h.apiserverWrites(ctx)
	if err != nil {
		return r, err
	}
	r.MachineBusy = readCPU().busySince(cpuBefore)
	snap.analyze(&r, refs, pre, start, policy != nil)
	r.HelmUpgrades = h.upgradesPlayed() - upgradesBefore
	r.ProviderRequests = Delta(before.requests, after.requests)
	r.RequestsTotal = total(r.ProviderRequests)
	for k, v := range r.ProviderRequests {
		if _, method, _ := strings.Cut(k, " "); slices.Contains(writeVerbs, method) {
			r.WriteRequests += v
		}
	}
	r.StatusPatches = Delta(apiBefore, apiAfter)["platform PATCH providerconfigs/status"]
	r.KroReconciles = after.kroReconciles - before.kroReconciles
	r.ProviderConfigReconciles = after.pcReconci - before.pcReconci
	r.ObjectChanges, r.KrosNotReady = changes, byReason(notReady)
	return r, nil
}

// versionRevision is the version's revision as the ProviderConfig's status has it now.
func (h *harness) versionRevision(ctx context.Context, version string) (string, error) {
	pc := &v1alpha1.ProviderConfig{}
	if err := h.pl.Get(ctx, client.ObjectKey{Name: providerName}, pc); err != nil {
		return "", err
	}
	for _, vs := range pc.Status.Versions {
		if vs.Version == version {
			return vs.Revision, nil
		}
	}
	return "", nil
}

// waitRolledOut waits until the recorder saw every Kro of refs Ready with the version's
// new revision and the status Complete; a paused rollout or the limit ends it.
func waitRolledOut(ctx context.Context, rec *rolloutRecorder, version string, refs []*kroRef, pre map[string]bool, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		snap := rec.snapshot()
		done, why := snap.finished(refs, pre)
		if done {
			return nil
		}
		if last := snap.last(); last != nil && last.vs.Rollout == v1alpha1.RolloutPaused {
			return fmt.Errorf("the rollout of %s paused: %s", version, last.vs.Message)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the rollout of %s did not complete in %s: %s", version, limit, why)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// rolloutRecorder records, from watches of its own, what a rollout does: when each
