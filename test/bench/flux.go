package bench

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// FluxResults is a run with real Flux: source-controller pulls kro's real chart from a
// TLS registry with basic auth, helm-controller installs it onto kwok ControlPlanes
// (whose fake nodes make kro's Deployment Available), and the provider wires it up.
type FluxResults struct {
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Machine  Machine   `json:"machine"`
	// ControlPlanes is N: kwok ControlPlanes, each with a Kro of its own.
	ControlPlanes int    `json:"controlPlanes"`
	Repeats       int    `json:"repeats"`
	IdleWindow    string `json:"idleWindow"`
	PollInterval  string `json:"pollInterval"`
	// Flux and Chart name what ran: the controllers' versions and the chart.
	Flux  string `json:"flux"`
	Chart string `json:"chart"`
	// Setup is how long each step of bringing up the environment took, in seconds.
	Setup map[string]float64 `json:"setupSeconds"`

	// Applied: Kro created until its OCIRepository and HelmRelease exist with the right spec.
	Applied Dist `json:"createdToApplied"`
	// Ready: Kro created until Ready: chart pulled, kro installed and Available.
	Ready Dist `json:"createdToReady"`
	// HelmReadyToKroReady: helm-controller's Ready=True seen until the Kro's Ready seen.
	HelmReadyToKroReady Dist `json:"helmReleaseReadyToKroReady"`
	// RGDDeletion: the last RGD deleted on a ControlPlane until the blocked Kro is gone,
	// helm-controller's uninstall of kro included.
	RGDDeletion Dist `json:"rgdDeletion"`
	// RGDDeletionToUninstall: the same start until the provider deleted the HelmRelease
	// (the provider's part of RGDDeletion).
	RGDDeletionToUninstall Dist     `json:"rgdDeletionToHelmReleaseDeleted"`
	ChartSecretRotation    Rotation `json:"chartSecretRotation"`
	ImageSecretRotation    Rotation `json:"imageSecretRotation"`
	SecretRestored         Dist     `json:"secretRestored"`
	Idle                   Idle     `json:"idle"`
	Restart                Restart  `json:"restart"`

	BaselineRSSMiB  float64 `json:"baselineRSSMiB"`
	BaselineHeapMiB float64 `json:"baselineHeapInuseMiB"`
	RSSMiB          float64 `json:"rssMiB"`
	HeapMiB         float64 `json:"heapInuseMiB"`

	// Shards is the run with Flux's sharding (Config.FluxShards > 0).
	Shards *FluxShardResults `json:"shards,omitempty"`
}

// versionFlux is the version the ProviderConfig offers in flux mode.
const versionFlux = "v" + chartVersion

// RunFlux measures the provider with real Flux on cfg.FluxControlPlanes kwok ControlPlanes.
func RunFlux(ctx context.Context, cfg Config) (*FluxResults, error) {
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	cfg.Repeats = max(cfg.Repeats, 1)
	cfg.Concurrency = max(cfg.Concurrency, 1)
	if cfg.FluxControlPlanes < 1 {
		return nil, fmt.Errorf("need at least one ControlPlane in flux mode")
	}
	start := time.Now()
	h := newHarness(cfg)
	h.realFlux = true
	res := &FluxResults{
		Started: start.UTC().Truncate(time.Second), Machine: machine(), ControlPlanes: cfg.FluxControlPlanes,
		Repeats: cfg.Repeats, IdleWindow: cfg.IdleWindow.String(), PollInterval: pollInterval.String(),
		Flux: fluxVersions(), Chart: chartVersion,
		Setup: map[string]float64{},
	}
	defer h.stop()
	if err := h.setupFlux(ctx, res); err != nil {
		return nil, err
	}
	if err := h.runFlux(ctx, res); err != nil {
		return res, err
	}
	res.Duration = time.Since(start).Round(time.Second).String()
	return res, nil
}

// fluxVersions reads the Flux controllers' versions from the wrapper module that builds them.
func fluxVersions() string {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "source-controller, helm-controller"
	}
	var parts []string
	gomod, _ := os.ReadFile(filepath.Join(root, testenv.SandboxModule, "go.mod"))
	for _, module := range []string{"github.com/fluxcd/source-controller", "github.com/fluxcd/helm-controller"} {
		v := "?"
		for line := range strings.SplitSeq(string(gomod), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == module {
				v = f[1]
			}
		}
		parts = append(parts, module[strings.LastIndex(module, "/")+1:]+" "+v)
	}
	return strings.Join(parts, ", ")
}

// setupFlux starts the end-to-end environment (platform with Flux, onboarding, the
// registry with kro's chart, kwok ControlPlanes), the provider and the harness's watches.
func (h *harness) setupFlux(ctx context.Context, res *FluxResults) error {
	if err := h.buildProvider(ctx); err != nil {
		return err
	}
	var names []string
	for i := range h.cfg.FluxControlPlanes {
		names = append(names, fmt.Sprintf("cp-%d", i+1))
	}
	h.logf("starting the real-Flux environment with %d kwok ControlPlanes (builds what is missing)", len(names))
	opts := testenv.E2EOptions{
		Dir:              filepath.Join(h.cfg.WorkDir, "env"),
		OtherClusters:    []testenv.ClusterOptions{{Name: "onboarding"}},
		ControlPlanes:    names,
		KroChartVersions: []string{chartVersion},
	}
	if h.cfg.FluxShards > 0 {
		opts.FluxWatchLabelSelector = "!" + v1alpha1.LabelFluxShard
	}
	e, err := testenv.StartE2E(ctx, h.cfg.Log, opts)
	if err != nil {
		return err
	}
	h.e2e = e
	if h.cfg.FluxShards > 0 {
		if err := h.startFluxShards(ctx, res); err != nil {
			return err
		}
	}
	for _, t := range e.Timings {
		res.Setup[t.Step] = round(t.Duration.Seconds())
	}
	h.platform, h.onboarding, h.chartURL = e.Platform, e.Others[0], e.ChartURL
	for _, cp := range e.ControlPlanes {
		h.dedConfigs = append(h.dedConfigs, cp.Config)
	}
	// Rotated pull secrets must still let Flux and the ControlPlanes pull: the rotation adds
	// an entry for another registry and keeps the real one.
	h.pullSecretData = func(nonce string) map[string][]byte {
		cfg := map[string]map[string]any{}
		_ = json.Unmarshal(e.Registry.DockerConfigJSON(), &cfg)
		cfg["auths"]["rotation.invalid"] = map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("rotation:" + nonce))}
		b, _ := json.Marshal(cfg)
		return map[string][]byte{corev1.DockerConfigJsonKey: b}
	}
	if v, err := discovery.NewDiscoveryClientForConfigOrDie(h.onboarding.Config).ServerVersion(); err == nil {
		res.Machine.KubeAPIServer = v.GitVersion
	}
	if err := h.connect(ctx); err != nil {
		return err
	}
	if err := h.prepareClusters(ctx, []v1alpha1.KroVersion{{
		Version: versionFlux, ChartURL: h.chartURL, ChartVersion: chartVersion, ChartPullSecret: chartSecret,
		HelmValues: imagePullSecretValues(),
	}}); err != nil {
		return err
	}
	if err := h.startWatches(ctx); err != nil {
		return err
	}
	for i, cp := range e.ControlPlanes {
		ref := h.newRef(cp.Name, versionFlux, nil, i)
		if err := h.pl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ref.tenant}}); err != nil {
			return err
		}
		if err := h.pl.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: accessSecret, Namespace: ref.tenant, Labels: map[string]string{v1alpha1.LabelControlPlaneKubeconfig: "true"}},
			Data:       map[string][]byte{owned.KubeconfigKey: cp.Kubeconfig},
		}); err != nil {
			return err
		}
	}
	return h.startProvider(ctx)
}

// runFlux installs kro with every Kro, Repeats times: Kros created → applied → Ready;
// in the first round the steady-state measurements; then each deletion is blocked by an
// RGD and released by deleting it, which uninstalls kro again.
func (h *harness) runFlux(ctx context.Context, res *FluxResults) error {
	if _, err := h.waitSettled(ctx, 0, 0); err != nil {
		return err
	}
	var err error
	if res.BaselineRSSMiB, res.BaselineHeapMiB, err = h.memory(ctx); err != nil {
		return err
	}
	var applied, ready, helmToReady, gone, toUninstall []time.Duration
	n := len(h.kros)
	for r := range h.cfg.Repeats {
		h.logf("flux round %d/%d: creating %d Kros", r+1, h.cfg.Repeats, n)
		var mu sync.Mutex
		if err := h.parallel(h.kros, func(k *kroRef) error {
			a, rd, hr, err := h.installOnce(ctx, k)
			mu.Lock()
			defer mu.Unlock()
			applied, ready, helmToReady = append(applied, a), append(ready, rd), append(helmToReady, hr)
			return err
		}); err != nil {
			return err
		}
		if r == 0 {
			if err := h.fluxSteadyState(ctx, res); err != nil {
				return err
			}
			if h.cfg.FluxShards > 0 {
				if err := h.fluxShardSteadyState(ctx, res); err != nil {
					return err
				}
			}
		}
		h.logf("flux round %d/%d: deleting the Kros, each blocked by an RGD", r+1, h.cfg.Repeats)
		if err := h.parallel(h.kros, func(k *kroRef) error {
			g, u, err := h.blockedDeletionOnce(ctx, k, fmt.Sprintf("bench-%d", r))
			mu.Lock()
			defer mu.Unlock()
			gone, toUninstall = append(gone, g), append(toUninstall, u)
			return err
		}); err != nil {
			return err
		}
	}
	res.Applied, res.Ready, res.HelmReadyToKroReady = Summarize(applied), Summarize(ready), Summarize(helmToReady)
	res.RGDDeletion, res.RGDDeletionToUninstall = Summarize(gone), Summarize(toUninstall)
	h.logf("flux: applied p99 %.0fms, ready p99 %.0fms, HR Ready -> Kro Ready p99 %.0fms, RGD deleted -> gone p99 %.0fms",
		res.Applied.P99, res.Ready.P99, res.HelmReadyToKroReady.P99, res.RGDDeletion.P99)
	return nil
}

// installOnce creates k's Kro and times it to its Flux objects, to Ready, and from
// helm-controller's Ready to the Kro's.
func (h *harness) installOnce(ctx context.Context, k *kroRef) (applied, ready, helmToReady time.Duration, err error) {
	if err = h.createKro(ctx, k); err != nil {
		return
	}
	var oci, hr, kro, flux time.Time
	if oci, err = h.tr.waitAddedAfter(ctx, "applied-oci|"+k.tenant, k.created); err != nil {
		return
	}
	if hr, err = h.tr.waitAddedAfter(ctx, "applied-hr|"+k.tenant, k.created); err != nil {
		return
	}
	if kro, err = h.tr.waitAddedAfter(ctx, "kroready|"+string(k.uid), k.created); err != nil {
		return
	}
	if flux, err = h.tr.waitAddedAfter(ctx, "fluxready-hr|"+k.tenant, k.created); err != nil {
		return
	}
	return later(oci, hr).Sub(k.created), kro.Sub(k.created), max(0, kro.Sub(flux)), nil
}

// blockedDeletionOnce puts an RGD on k's ControlPlane, deletes the Kro, waits until the
// deletion is blocked, deletes the RGD and times until the provider deletes the
// HelmRelease and until the Kro is gone.
func (h *harness) blockedDeletionOnce(ctx context.Context, k *kroRef, name string) (gone, toUninstall time.Duration, err error) {
	c := h.ded[k.dedicated]
	crdCtx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	if err = testenv.WaitForCRD(crdCtx, c, "resourcegraphdefinitions.kro.run", 100*time.Millisecond); err != nil {
		return
	}
	u := rgd(name)
	if err = c.Create(ctx, u); err != nil {
		return 0, 0, fmt.Errorf("creating RGD on %s: %w", k.name, err)
	}
	if _, err = h.tr.wait(ctx, []string{"rgds|" + string(k.uid)}, "the Kro to count the RGD"); err != nil {
		return
	}
	if err = h.ob.Delete(ctx, k.object()); err != nil {
		return
	}
	if _, err = h.tr.wait(ctx, []string{"blocked|" + string(k.uid)}, "the deletion to be blocked"); err != nil {
		return
	}
	start := time.Now()
	if err = c.Delete(ctx, u); err != nil {
		return
	}
	var deleting time.Time
	if deleting, err = h.tr.waitAddedAfter(ctx, "hrdeleting|"+k.tenant, start); err != nil {
		return
	}
	var seen map[string]time.Time
	if seen, err = h.tr.wait(ctx, []string{"gone|" + string(k.uid)}, "the Kro to be gone"); err != nil {
		return
	}
	return seen["gone|"+string(k.uid)].Sub(start), deleting.Sub(start), nil
}

// fluxSteadyState measures with every Kro Ready and kro installed: memory, idle cost,
// restart, both rotations and the restore of a deleted image pull secret copy.
func (h *harness) fluxSteadyState(ctx context.Context, res *FluxResults) error {
	n := len(h.kros)
	if _, err := h.waitSettled(ctx, n, 0); err != nil {
		return err
	}
	var err error
	if res.RSSMiB, res.HeapMiB, err = h.memory(ctx); err != nil {
		return err
	}
	h.logf("flux: idle for %s", h.cfg.IdleWindow)
	if res.Idle, err = h.idle(ctx, n); err != nil {
		return err
	}
	h.logf("flux: restart with %d Kros", n)
	if res.Restart, err = h.restart(ctx, n); err != nil {
		return err
	}
	h.logf("flux: rotating the chart and image pull secrets x%d", h.cfg.Repeats)
	if res.ChartSecretRotation, err = h.rotate(ctx, chartSecret, chartCopies(h.kros)); err != nil {
		return err
	}
	if res.ImageSecretRotation, err = h.rotate(ctx, imageSecret, imageCopies(h.kros)); err != nil {
		return err
	}
	h.logf("flux: deleting replicated image pull secrets x%d", h.cfg.Repeats)
	res.SecretRestored, err = h.restore(ctx, h.kros)
	return err
}
