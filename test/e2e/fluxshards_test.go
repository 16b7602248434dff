//go:build e2e

package e2e

import (
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// Flux's sharding (issue 24): the environment's own Flux runs with
// --watch-label-selector='!sharding.fluxcd.io/key', and two more source-controller and
// helm-controller pairs each select one shard key, as Flux documents it. fs-1's
// ControlPlane hashes to shard-b among {shard-a, shard-b}, fs-2's to shard-a, so adding
// shard-b moves fs-1 alone. A move changes the objects' label only: kro's Helm release
// on the ControlPlane keeps its one revision (no uninstall, no second install), and the
// shard that owns a tenant is proven by stopping the others and asking Flux to reconcile.
// A third key added while a tenant's Helm upgrade runs moves it only once the upgrade has
// ended (fluxshards_busy_test.go).

var _ = Describe("Flux shards", Ordered, Label("fluxshards"), func() {
	const shardA, shardB = "shard-a", "shard-b"
	var (
		se     *env.Env
		cps    []*env.ControlPlane
		shards = map[string]*testenv.Flux{}
	)
	refs := []env.ControlPlaneRef{{Name: "fs-1", Namespace: "fs-1"}, {Name: "fs-2", Namespace: "fs-2"}}

	setShards := func(keys ...string) {
		GinkgoHelper()
		updateProviderConfig(se, func(pc *v1alpha1.ProviderConfig) { pc.Spec.FluxShards = keys })
	}
	// shardOf is the shard label of cp's Flux objects, which both must carry alike.
	shardOf := func(g Gomega, cp *env.ControlPlane) string {
		repo, hr := &sourcev1.OCIRepository{}, &helmv2.HelmRelease{}
		key := client.ObjectKey{Namespace: cp.TenantNamespace, Name: se.ProviderName}
		g.Expect(se.Platform.Client.Get(suiteCtx, key, repo)).To(Succeed())
		g.Expect(se.Platform.Client.Get(suiteCtx, key, hr)).To(Succeed())
		g.Expect(hr.Labels[v1alpha1.LabelFluxShard]).To(Equal(repo.Labels[v1alpha1.LabelFluxShard]), "OCIRepository and HelmRelease on one shard")
		return hr.Labels[v1alpha1.LabelFluxShard]
	}
	// expectShards waits for the tenants to be on the shards want names and the status to
	// count them; during a move, a Kro whose HelmRelease turns not Ready on the way fails it.
	expectShards := func(moving bool, want map[string]string, counts []v1alpha1.FluxShardStatus) {
		GinkgoHelper()
		var notReady []string
		eventually(2*time.Minute, func(g Gomega) {
			for _, cp := range cps {
				if kro := getKroIn(g, se, cp); moving && condition(kro, v1alpha1.ConditionHelmReleaseReady).Status == metav1.ConditionFalse {
					notReady = append(notReady, describeKro(kro))
				}
			}
			for _, cp := range cps {
				g.Expect(shardOf(g, cp)).To(Equal(want[cp.Name]), cp.Name)
				kro := getKroIn(g, se, cp)
				g.Expect(kro.Status.Phase).To(Equal(v1alpha1.PhaseReady), describeKro(kro))
				g.Expect(kro.Status.ObservedGeneration).To(Equal(kro.Generation), describeKro(kro))
			}
			pc := &v1alpha1.ProviderConfig{}
			g.Expect(se.Platform.Client.Get(suiteCtx, client.ObjectKey{Name: se.ProviderName}, pc)).To(Succeed())
			g.Expect(pc.Status.FluxShards).To(Equal(counts))
		})
		Expect(notReady).To(BeEmpty(), "a move between shards keeps kro's release Ready")
	}
	// releases are the Helm release secrets of kro on the ControlPlane: one revision means
	// kro was installed once and never upgraded or reinstalled.
	releases := func(cp *env.ControlPlane) []string {
		GinkgoHelper()
		var list corev1.SecretList
		Expect(cp.Client.List(suiteCtx, &list, client.InNamespace(owned.KroNamespace), client.MatchingLabels{"owner": "helm"})).To(Succeed())
		var names []string
		for _, s := range list.Items {
			names = append(names, s.Name+"@"+string(s.UID))
		}
		return names
	}
	// reconciledBy asks Flux to reconcile cp's HelmRelease now and tells whether a
	// running helm-controller answered within the time given.
	reconciledBy := func(cp *env.ControlPlane, within time.Duration) bool {
		GinkgoHelper()
		hr := &helmv2.HelmRelease{}
		Expect(se.Platform.Client.Get(suiteCtx, client.ObjectKey{Namespace: cp.TenantNamespace, Name: se.ProviderName}, hr)).To(Succeed())
		token := time.Now().Format(time.RFC3339Nano)
		patch := client.MergeFrom(hr.DeepCopy())
		metav1.SetMetaDataAnnotation(&hr.ObjectMeta, "reconcile.fluxcd.io/requestedAt", token)
		Expect(se.Platform.Client.Patch(suiteCtx, hr, patch)).To(Succeed())
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			Expect(se.Platform.Client.Get(suiteCtx, client.ObjectKeyFromObject(hr), hr)).To(Succeed())
			if hr.Status.LastHandledReconcileAt == token {
				return true
			}
			time.Sleep(500 * time.Millisecond)
		}
		return false
	}

	BeforeAll(func() {
		se = startRolloutEnv("fluxshards", "fluxshards", refs, func(o *env.Options) {
			o.FluxWatchLabelSelector = "!" + v1alpha1.LabelFluxShard
		})
		cps = se.ControlPlanes
		for _, key := range []string{shardA, shardB} {
			var err error
			measure("fluxshards: shard "+key+" up", func() { shards[key], err = se.StartFluxShard(suiteCtx, key) })
			Expect(err).NotTo(HaveOccurred())
		}
	})

	It("installs each tenant by the shard of its key only", func() {
		setShards(shardA)
		measure("fluxshards: Kros → Ready on shard-a", func() {
			for _, cp := range cps {
				Expect(se.Onboarding.Client.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cp.Namespace}})).To(Succeed())
				kro := kroOf(cp)
				kro.Spec.Version = "v0.9.4"
				Expect(se.Onboarding.Client.Create(suiteCtx, kro)).To(Succeed())
			}
			expectShards(false, map[string]string{"fs-1": shardA, "fs-2": shardA}, []v1alpha1.FluxShardStatus{{Key: shardA, Kros: 2}})
		})
		for _, cp := range cps {
			Expect(releases(cp)).To(HaveLen(1), "%s: kro installed once", cp.Name)
		}
		By("with shard-a stopped, neither the unsharded Flux nor shard-b reconciles the tenants")
		Expect(shards[shardA].StopController(testenv.HelmController.Name)).To(Succeed())
		Expect(reconciledBy(cps[0], 10*time.Second)).To(BeFalse())
		Expect(shards[shardA].StartController(suiteCtx, testenv.HelmController.Name)).To(Succeed())
		Expect(reconciledBy(cps[0], time.Minute)).To(BeTrue())
	})

	It("moves only the tenants whose key changes when a shard is added, without reinstalling kro", func() {
		before := map[string][]string{}
		for _, cp := range cps {
			before[cp.Name] = releases(cp)
		}
		measure("fluxshards: shard-b added → fs-1 moved", func() {
			setShards(shardA, shardB)
			expectShards(true, map[string]string{"fs-1": shardB, "fs-2": shardA}, []v1alpha1.FluxShardStatus{{Key: shardA, Kros: 1}, {Key: shardB, Kros: 1}})
		})
		By("shard-b reconciles fs-1 alone, shard-a fs-2 alone")
		Expect(shards[shardA].StopController(testenv.HelmController.Name)).To(Succeed())
		Expect(reconciledBy(cps[0], time.Minute)).To(BeTrue(), "fs-1 on shard-b")
		Expect(reconciledBy(cps[1], 10*time.Second)).To(BeFalse(), "fs-2 waits for shard-a")
		Expect(shards[shardA].StartController(suiteCtx, testenv.HelmController.Name)).To(Succeed())
		Expect(shards[shardB].StopController(testenv.HelmController.Name)).To(Succeed())
		Expect(reconciledBy(cps[1], time.Minute)).To(BeTrue(), "fs-2 on shard-a")
		Expect(reconciledBy(cps[0], 10*time.Second)).To(BeFalse(), "fs-1 waits for shard-b")
		Expect(shards[shardB].StartController(suiteCtx, testenv.HelmController.Name)).To(Succeed())
		for _, cp := range cps {
			Expect(releases(cp)).To(Equal(before[cp.Name]), "%s: the same release, never reinstalled or upgraded", cp.Name)
		}
	})

	fluxShardMoveDuringUpgradeSpecs(fluxShardsKit{
		env: func() *env.Env { return se }, cps: func() []*env.ControlPlane { return cps },
		shards: shards, setShards: setShards, shardOf: shardOf,
	})

	It("moves the tenants back to the unsharded Flux when the shards are removed, then deletes them", func() {
		before := map[string][]string{}
		for _, cp := range cps {
			before[cp.Name] = releases(cp)
		}
		measure("fluxshards: shards removed → unsharded Flux", func() {
			setShards()
			expectShards(true, map[string]string{"fs-1": "", "fs-2": ""}, nil)
		})
		for _, shard := range shards {
			Expect(shard.Stop()).To(Succeed())
		}
		for _, cp := range cps {
			Expect(reconciledBy(cp, time.Minute)).To(BeTrue(), "%s on the unsharded Flux", cp.Name)
			Expect(releases(cp)).To(Equal(before[cp.Name]), "%s: the same release", cp.Name)
		}
		measure("fluxshards: Kros deleted", func() {
			for _, cp := range cps {
				Expect(se.Onboarding.Client.Delete(suiteCtx, kroOf(cp))).To(Succeed())
			}
			eventually(5*time.Minute, func(g Gomega) {
				for _, cp := range cps {
					var list v1alpha1.KroList
					g.Expect(se.Onboarding.Client.List(suiteCtx, &list, client.InNamespace(cp.Namespace))).To(Succeed())
					g.Expect(list.Items).To(BeEmpty())
				}
			})
		})
		for _, cp := range cps {
			expectKroUninstalled(cp.Client)
		}
	})
})
