package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/config/crd"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/providers/sharding"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// TestShardedReplicasShareTheKros runs two replicas with --sharding on clusters of their
// own. Each Kro is reconciled by exactly one of them: only its owner's field manager is
// on the Kro. When one replica stops, the other takes over its Kros: deleting them
// completes, which needs the ControlPlane engaged by the new owner.
func TestShardedReplicasShareTheKros(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ob, err := crd.ForCluster(clusters.Onboarding)
	g.Expect(err).NotTo(HaveOccurred())
	pl, err := crd.ForCluster(clusters.Platform)
	g.Expect(err).NotTo(HaveOccurred())
	flux, err := testenv.FluxCRDDirs(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	kroCRDs, err := testenv.KroCRDDir(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	cs, err := testenv.StartClusters(ctx,
		testenv.ClusterOptions{Name: "sharded-onboarding", CRDs: ob},
		testenv.ClusterOptions{Name: "sharded-platform", CRDs: pl, CRDDirs: flux},
		testenv.ClusterOptions{Name: "sharded-controlplane", CRDDirs: []string{kroCRDs}},
	)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { testenv.StopClusters(cs...) })
	obc, plc, cpc := cs[0], cs[1], cs[2]
	g.Expect(plc.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podNamespace}})).To(Succeed())
	g.Expect(plc.Client.Create(ctx, &v1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: providerName},
		Spec: v1alpha1.ProviderConfigSpec{
			PollInterval: &metav1.Duration{Duration: suitePollInterval},
			Versions:     []v1alpha1.KroVersion{{Version: baseVersion, ChartVersion: "0.9.3"}},
		},
	})).To(Succeed())

	replicas := map[string]*shardedReplica{}
	for _, id := range []string{"replica-a", "replica-b"} {
		replicas[id] = startShardedReplica(t, g, obc, plc, id)
	}
	for _, r := range replicas {
		g.Eventually(r.shard.Members, timeout, interval).Should(Equal([]string{"replica-a", "replica-b"}))
	}

	// Kros until each replica owns at least two.
	var kros []*v1alpha1.Kro
	perReplica := map[string]int{}
	for i := 0; perReplica["replica-a"] < 2 || perReplica["replica-b"] < 2; i++ {
		ns := fmt.Sprintf("shard-%d", i)
		g.Expect(obc.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		k := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cp"}, Spec: v1alpha1.KroSpec{Version: baseVersion}}
		tenant, err := owned.TenantNamespace(k)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(plc.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}})).To(Succeed())
		g.Expect(plc.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "controlplane-access", Namespace: tenant, Labels: map[string]string{v1alpha1.LabelControlPlaneKubeconfig: "true"}},
			Data:       map[string][]byte{owned.KubeconfigKey: cpc.Kubeconfig},
		})).To(Succeed())
		g.Expect(obc.Client.Create(ctx, k)).To(Succeed())
		kros = append(kros, k)
		perReplica[sharding.Owner(shardKey(client.ObjectKeyFromObject(k)), []string{"replica-a", "replica-b"})]++
	}

	// Each Kro carries the field manager of its owner, and only that one.
	ownerOf := func(k *v1alpha1.Kro) string {
		return sharding.Owner(shardKey(client.ObjectKeyFromObject(k)), []string{"replica-a", "replica-b"})
	}
	for _, k := range kros {
		g.Eventually(func(g Gomega) {
			got := &v1alpha1.Kro{}
			g.Expect(obc.Client.Get(ctx, client.ObjectKeyFromObject(k), got)).To(Succeed())
			g.Expect(got.Finalizers).To(ContainElement(v1alpha1.Finalizer))
			g.Expect(condition(got, v1alpha1.ConditionOCIRepositoryReady)).NotTo(BeNil())
			var managers []string
			for _, f := range got.ManagedFields {
				if f.Manager == "replica-a" || f.Manager == "replica-b" {
					managers = append(managers, f.Manager)
				}
			}
			g.Expect(managers).NotTo(BeEmpty())
			for _, m := range managers {
				g.Expect(m).To(Equal(ownerOf(k)), "Kro %s written by %s", k.Namespace, m)
			}
		}, timeout, interval).Should(Succeed())
	}

	// The ProviderConfig's status has one writer, the owner of its key, and is written.
	g.Eventually(func(g Gomega) {
		pc := &v1alpha1.ProviderConfig{}
		g.Expect(plc.Client.Get(ctx, client.ObjectKey{Name: providerName}, pc)).To(Succeed())
		g.Expect(pc.Status.ObservedGeneration).To(Equal(pc.Generation))
	}, timeout, interval).Should(Succeed())
	g.Expect(replicas["replica-a"].shard.Owns(providerConfigShardKey(providerName))).
		NotTo(Equal(replicas["replica-b"].shard.Owns(providerConfigShardKey(providerName))))

	// replica-a stops: replica-b takes its Kros over. Deleting them completes, which
	// needs their ControlPlanes engaged (the deletion guard lists their RGDs).
	replicas["replica-a"].stop()
	g.Eventually(replicas["replica-b"].shard.Members, timeout, interval).Should(Equal([]string{"replica-b"}))
	for _, k := range kros {
		if ownerOf(k) == "replica-a" {
			g.Expect(obc.Client.Delete(ctx, k)).To(Succeed())
		}
	}
	for _, k := range kros {
		if ownerOf(k) == "replica-a" {
			eventuallyGone(g, obc.Client, k)
		}
	}
}

type shardedReplica struct {
	shard *sharding.Membership
	stop  func()
}

// startShardedReplica runs one replica: a membership and the provider on the given
// clusters, writing under its own identity so that the test can tell who wrote what.
func startShardedReplica(t *testing.T, g Gomega, ob, pl *testenv.Cluster, id string) *shardedReplica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	shard, err := sharding.New(pl.Config, sharding.Options{
		Namespace: podNamespace, Identity: id, LeaseDuration: 6 * time.Second,
		Labels: map[string]string{v1alpha1.LabelProvider: providerName, v1alpha1.LabelRole: v1alpha1.RoleShardMember},
		Log:    logr.Discard(),
	})
	g.Expect(err).NotTo(HaveOccurred())
	mgr := newTestManager(g, ob.Config)
	g.Expect(mgr.Add(shard)).To(Succeed())
	g.Expect(Setup(ctx, mgr, pl.Config, Options{
		ProviderName: providerName, PodNamespace: podNamespace, Identity: id, Shard: shard,
		ProbeInterval: 500 * time.Millisecond, MaxBackoff: 2 * time.Second,
	})).To(Succeed())
	return &shardedReplica{shard: shard, stop: runTestManager(t, ctx, cancel, mgr)}
}
