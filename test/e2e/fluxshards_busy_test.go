//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// A shard move waits for the release operation in flight (issue 31, point 7), with the
// real helm-controller. A Helm upgrade is made slow by a value: kro's pods must run on
// a node labelled slowUpgradeLabel, which the ControlPlane's kwok node lacks, so the new
// pod stays Pending and helm-controller waits for kro's Deployment (Reconciling=True,
// Progressing, "Running 'upgrade' action") until the spec labels the node. (kwokctl's
// default pod stages are kwok's "fast" ones, which ignore the
// pod-ready.stage.kwok.x-k8s.io/delay annotation, so the spec holds the upgrade itself,
// for as long as it wants and no longer.) A shard key that moves the tenant is added
// while the upgrade runs: the OCIRepository moves, the HelmRelease stays on the shard
// whose helm-controller runs the upgrade until that upgrade has ended, then moves; Helm's
// history has no revision failed by a lock (a new shard's helm-controller that found the
// release pending-upgrade would have unlocked it as failed).

// slowUpgradeLabel is the node label kro's pods need under slowUpgradeValues.
const slowUpgradeLabel = "e2e.kro.run/upgrade"

// slowUpgradeValues are the helmValues of the upgrade (chart value
// deployment.nodeSelector; Helm merges it with the chart's kubernetes.io/os: linux).
var slowUpgradeValues = `{"deployment":{"nodeSelector":{"` + slowUpgradeLabel + `":"allowed"}}}`

// slowUpgradeHold is how long the spec keeps the upgrade in flight after the key is added.
const slowUpgradeHold = 20 * time.Second

// fluxShardsKit is what the Flux shards container shares with the specs of other files.
type fluxShardsKit struct {
	env       func() *env.Env
	cps       func() []*env.ControlPlane
	shards    map[string]*testenv.Flux
	setShards func(keys ...string)
	shardOf   func(g Gomega, cp *env.ControlPlane) string
}

// helmHistory is kro's Helm release history on a ControlPlane, oldest first, as
// "v<revision>=<status>" from the release secrets' labels.
func helmHistory(g Gomega, cp *env.ControlPlane) []string {
	var list corev1.SecretList
	g.Expect(cp.Client.List(suiteCtx, &list, client.InNamespace(owned.KroNamespace),
		client.MatchingLabels{"owner": "helm", "name": owned.ReleaseName})).To(Succeed())
	type rev struct {
		n      int
		status string
	}
	var revs []rev
	for _, s := range list.Items {
		n, err := strconv.Atoi(s.Labels["version"])
		g.Expect(err).NotTo(HaveOccurred(), "release secret %s: version label %q", s.Name, s.Labels["version"])
		revs = append(revs, rev{n, s.Labels["status"]})
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i].n < revs[j].n })
	out := make([]string, 0, len(revs))
	for _, r := range revs {
		out = append(out, fmt.Sprintf("v%d=%s", r.n, r.status))
	}
	return out
}

// labelNodes sets (value "") or removes (value nil) a label on every node of a ControlPlane.
func labelNodes(cp *env.ControlPlane, key string, value *string) {
	GinkgoHelper()
	var nodes corev1.NodeList
	Expect(cp.Client.List(suiteCtx, &nodes)).To(Succeed())
	Expect(nodes.Items).NotTo(BeEmpty(), "%s has nodes", cp.Name)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]*string{key: value}}})
	Expect(err).NotTo(HaveOccurred())
	for i := range nodes.Items {
		Expect(cp.Client.Patch(suiteCtx, &nodes.Items[i], client.RawPatch(types.MergePatchType, patch))).To(Succeed())
	}
}

// fluxShardMoveDuringUpgradeSpecs: run after the container's shards hold both tenants.
func fluxShardMoveDuringUpgradeSpecs(k fluxShardsKit) {
	It("moves a tenant whose Helm upgrade is in flight only once the upgrade has ended, with no revision failed by a lock", func() {
		se, cps := k.env(), k.cps()
		fluxKey := func(cp *env.ControlPlane) client.ObjectKey {
			return client.ObjectKey{Namespace: cp.TenantNamespace, Name: se.ProviderName}
		}
		pc := &v1alpha1.ProviderConfig{}
		Expect(se.Platform.Client.Get(suiteCtx, client.ObjectKey{Name: se.ProviderName}, pc)).To(Succeed())
		keys := append([]string{}, pc.Spec.FluxShards...)
		Expect(keys).NotTo(BeEmpty(), "the tenants are on shards")

		By("picking a new key that moves a tenant, and starting its shard")
		var target *env.ControlPlane
		var newKey string
		for c := 'c'; c <= 'z' && target == nil; c++ {
			cand := fmt.Sprintf("shard-%c", c)
			for _, cp := range cps {
				if flux.ShardOf(kroOf(cp), append(append([]string{}, keys...), cand)) == cand {
					target, newKey = cp, cand
					break
				}
			}
		}
		Expect(target).NotTo(BeNil(), "a key among shard-c…shard-z moves a tenant")
		oldKey := flux.ShardOf(kroOf(target), keys)
		fmt.Fprintf(GinkgoWriter, "%s moves from %s to %s\n", target.Name, oldKey, newKey)
		var err error
		measure("fluxshards: shard "+newKey+" up", func() { k.shards[newKey], err = se.StartFluxShard(suiteCtx, newKey) })
		Expect(err).NotTo(HaveOccurred())

		hrOf := func(g Gomega) *helmv2.HelmRelease {
			hr := &helmv2.HelmRelease{}
			g.Expect(se.Platform.Client.Get(suiteCtx, fluxKey(target), hr)).To(Succeed())
			return hr
		}
		upgrading := func(hr *helmv2.HelmRelease) bool {
			c := apimeta.FindStatusCondition(hr.Status.Conditions, meta.ReconcilingCondition)
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == meta.ProgressingReason &&
				strings.Contains(c.Message, "'upgrade'")
		}
		describeHR := func(hr *helmv2.HelmRelease) string {
			var b strings.Builder
			fmt.Fprintf(&b, "HelmRelease %s/%s shard %q gen %d", hr.Namespace, hr.Name, hr.Labels[v1alpha1.LabelFluxShard], hr.Generation)
			for _, c := range hr.Status.Conditions {
				fmt.Fprintf(&b, "\n  %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
			}
			return b.String()
		}
		before := helmHistory(Default, target)
		Expect(before).NotTo(BeEmpty())

		measure("fluxshards: key added during a slow upgrade → moved after it", func() {
			By("an upgrade of " + target.Name + " to v0.9.3 whose kro pod waits for a node label")
			updateProviderConfig(se, func(pc *v1alpha1.ProviderConfig) {
				for i := range pc.Spec.Versions {
					if pc.Spec.Versions[i].Version == "v0.9.3" {
						pc.Spec.Versions[i].HelmValues = &apiextensionsv1.JSON{Raw: []byte(slowUpgradeValues)}
					}
				}
			})
			Expect(se.Onboarding.Client.Patch(suiteCtx, kroOf(target),
				client.RawPatch(types.MergePatchType, []byte(`{"spec":{"version":"v0.9.3"}}`)))).To(Succeed())
			Eventually(func(g Gomega) {
				hr := hrOf(g)
				g.Expect(upgrading(hr)).To(BeTrue(), describeHR(hr))
			}).WithContext(suiteCtx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())

			By("adding " + newKey + " while helm-controller of " + oldKey + " runs the upgrade")
			k.setShards(append(append([]string{}, keys...), newKey)...)
			var sourceMoved, waitReported bool
			for deadline := time.Now().Add(slowUpgradeHold); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				hr := hrOf(Default)
				Expect(hr.Labels[v1alpha1.LabelFluxShard]).To(Equal(oldKey), "the HelmRelease moved while its upgrade ran:\n%s", describeHR(hr))
				Expect(upgrading(hr)).To(BeTrue(), "the upgrade ended before the spec let it: the hold proves nothing\n%s", describeHR(hr))
				repo := &sourcev1.OCIRepository{}
				Expect(se.Platform.Client.Get(suiteCtx, fluxKey(target), repo)).To(Succeed())
				sourceMoved = sourceMoved || repo.Labels[v1alpha1.LabelFluxShard] == newKey
				history := helmHistory(Default, target)
				Expect(history).NotTo(ContainElement(HaveSuffix("=failed")), "a revision failed while the upgrade ran: %v", history)
				for _, m := range getKroIn(Default, se, target).Status.ManagedResources {
					if m.Kind == helmv2.HelmReleaseKind && strings.Contains(m.Message, "waits for helm-controller to end the release operation in flight") {
						waitReported = true
					}
				}
			}
			Expect(sourceMoved).To(BeTrue(), "the OCIRepository moves to %s first", newKey)
			Expect(waitReported).To(BeTrue(), "the Kro's status says what the move waits for")

			By("letting the upgrade end: the HelmRelease moves to " + newKey)
			allowed := "allowed"
			labelNodes(target, slowUpgradeLabel, &allowed)
			eventually(2*time.Minute, func(g Gomega) {
				g.Expect(k.shardOf(g, target)).To(Equal(newKey))
				kro := getKroIn(g, se, target)
				g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseReady), describeKro(kro))
				g.Expect(kro.Status.ObservedGeneration).To(Equal(kro.Generation), describeKro(kro))
				g.Expect(kro.Status.ChartVersion).To(Equal("0.9.3"), describeKro(kro))
				hr := hrOf(g)
				g.Expect(hr.Status.History).NotTo(BeEmpty(), describeHR(hr))
				g.Expect(hr.Status.History.Latest().ChartVersion).To(chartVersion("0.9.3"), describeHR(hr))
				g.Expect(hr.Status.History.Latest().Status).To(Equal("deployed"), describeHR(hr))
				var deps appsv1.DeploymentList
				g.Expect(target.Client.List(suiteCtx, &deps, client.InNamespace(owned.KroNamespace))).To(Succeed())
				g.Expect(deps.Items).NotTo(BeEmpty())
				for _, d := range deps.Items {
					g.Expect(d.Spec.Template.Spec.NodeSelector).To(HaveKeyWithValue(slowUpgradeLabel, "allowed"), "Deployment %s has the upgraded values", d.Name)
				}
				for _, cp := range cps {
					if cp != target {
						g.Expect(k.shardOf(g, cp)).To(Equal(flux.ShardOf(kroOf(cp), append(append([]string{}, keys...), newKey))), cp.Name)
					}
				}
			})
		})

		By("Helm's history: the upgrade made one revision, deployed; none failed, none other deployed")
		history := helmHistory(Default, target)
		fmt.Fprintf(GinkgoWriter, "%s: kro's Helm history before %v, after %v\n", target.Name, before, history)
		// A new shard's helm-controller that found the release pending-upgrade marks it
		// failed and upgrades again, and the old shard's upgrade still ends with writing
		// its revision deployed: seen as v2=deployed v3=deployed.
		Expect(history).To(HaveLen(len(before)+1), "one upgrade, one revision: %v", history)
		for _, h := range history[:len(history)-1] {
			Expect(h).To(HaveSuffix("=superseded"), "%v", history)
		}
		Expect(history[len(history)-1]).To(HaveSuffix("=deployed"), "%v", history)
	})
}
