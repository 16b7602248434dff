//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
)

// tenantWorld is what an upgrade of the provider must leave alone: what was written to the
// Flux objects in the tenant namespaces other than their status (their generation and the
// time of each field manager's last write; Flux's controllers keep writing the status) and
// the UIDs of kro's pods on the ControlPlanes.
type tenantWorld map[string]string

func observeTenants(g Gomega, ke *env.Env, cps ...*env.ControlPlane) tenantWorld {
	w := tenantWorld{}
	for _, cp := range cps {
		for _, kind := range []string{"HelmRelease", "OCIRepository"} {
			list := &unstructured.UnstructuredList{}
			group, version := "helm.toolkit.fluxcd.io", "v2"
			if kind == "OCIRepository" {
				group, version = "source.toolkit.fluxcd.io", "v1"
			}
			list.SetAPIVersion(group + "/" + version)
			list.SetKind(kind + "List")
			g.Expect(ke.Platform.Client.List(suiteCtx, list, client.InNamespace(cp.TenantNamespace))).To(Succeed())
			g.Expect(list.Items).NotTo(BeEmpty(), "%s in %s", kind, cp.TenantNamespace)
			for _, o := range list.Items {
				writes := []string{fmt.Sprintf("generation %d", o.GetGeneration())}
				for _, f := range o.GetManagedFields() {
					if f.Subresource == "" {
						writes = append(writes, fmt.Sprintf("%s %s at %s", f.Manager, f.Operation, f.Time.UTC().Format(time.RFC3339)))
					}
				}
				w[kind+" "+cp.TenantNamespace+"/"+o.GetName()] = strings.Join(writes, "; ")
			}
		}
		var pods corev1.PodList
		g.Expect(cp.Client.List(suiteCtx, &pods, client.InNamespace(owned.KroNamespace))).To(Succeed())
		g.Expect(pods.Items).NotTo(BeEmpty(), "kro's pods on %s", cp.Name)
		for _, p := range pods.Items {
			w["kro pod on "+cp.Name+" "+p.Name] = string(p.UID)
		}
	}
	return w
}

// leaseWatch polls the provider's leader Lease and remembers when its holder changed.
type leaseWatch struct {
	mu       sync.Mutex
	released time.Time // the first time the old holder was gone from the Lease
	holders  []string
}

func (lw *leaseWatch) run(ctx context.Context, ke *env.Env, name string) {
	for ctx.Err() == nil {
		l := &coordinationv1.Lease{}
		if err := ke.Platform.Client.Get(ctx, client.ObjectKey{Namespace: env.KindPodNamespace, Name: name}, l); err == nil {
			holder := ""
			if l.Spec.HolderIdentity != nil {
				holder = *l.Spec.HolderIdentity
			}
			lw.mu.Lock()
			if len(lw.holders) == 0 || lw.holders[len(lw.holders)-1] != holder {
				if len(lw.holders) > 0 && lw.released.IsZero() {
					lw.released = time.Now()
				}
				lw.holders = append(lw.holders, holder)
			}
			lw.mu.Unlock()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// workersStarted is the time the pod's log says the Kro controller's workers started: the
// leader's first reconciles follow at once, since its cache sync queued every Kro.
func workersStarted(ke *env.Env, pod string) (time.Time, error) {
	cs, err := kubernetes.NewForConfig(ke.Platform.Config)
	if err != nil {
		return time.Time{}, err
	}
	// The kubelet's timestamps: the provider's own are in seconds.
	rc, err := cs.CoreV1().Pods(env.KindPodNamespace).GetLogs(pod, &corev1.PodLogOptions{Timestamps: true}).Stream(suiteCtx)
	if err != nil {
		return time.Time{}, err
	}
	defer func() { _ = rc.Close() }()
	s := bufio.NewScanner(rc)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		if !strings.Contains(s.Text(), "Starting workers") {
			continue
		}
		stamp, rest, _ := strings.Cut(s.Text(), " ")
		var line struct {
			Controller string `json:"controller"`
		}
		if err := json.Unmarshal([]byte(rest), &line); err != nil || !strings.Contains(line.Controller, "kro") {
			continue
		}
		return time.Parse(time.RFC3339Nano, stamp)
	}
	return time.Time{}, fmt.Errorf("no 'Starting workers' line of the Kro controller in %s's log", pod)
}

// itUpgradesInvisibly is the upgrade spec of the kind container ("on kind clusters"),
// which calls it while both Kros are Ready: ke gives that container's environment.
func itUpgradesInvisibly(keOf func() *env.Env) {
	It("upgrades the provider to a second release invisibly to tenants: no Flux object written, no kro pod replaced, both Kros Ready throughout", func() {
		ke := keOf()
		cp1, cp2 := ke.ControlPlane("cp-1"), ke.ControlPlane("cp-2")
		waitUntil(5*time.Minute, time.Second, func(g Gomega) {
			for _, cp := range []*env.ControlPlane{cp1, cp2} {
				g.Expect(condition(getKroOf(g, cp), "Ready").Status).To(Equal(metav1.ConditionTrue), cp.Name)
			}
		})
		before := observeTenants(Default, ke, cp1, cp2)
		second, err := ke.PublishRelease(suiteCtx, ke.Release.Version+".upgrade")
		Expect(err).NotTo(HaveOccurred())
		Expect(second.Digest).NotTo(Equal(ke.Release.Digest), "another version, another digest")

		ctx, stop := context.WithCancel(suiteCtx)
		defer stop()
		lw := &leaseWatch{}
		go lw.run(ctx, ke, clusters.LeaseName(ke.ProviderName))
		var notReady []string
		var mu sync.Mutex
		go func() { // the Kros' Ready condition, every half second, while the upgrade runs
			for ctx.Err() == nil {
				for _, cp := range []*env.ControlPlane{cp1, cp2} {
					kro := kroOf(cp) // read here, not with getKroOf: a failed assertion must not leave this goroutine
					if err := ke.Onboarding.Client.Get(ctx, client.ObjectKeyFromObject(kro), kro); err != nil {
						continue
					}
					if c := condition(kro, "Ready"); c.Status != metav1.ConditionTrue {
						mu.Lock()
						notReady = append(notReady, fmt.Sprintf("%s %s: %s", time.Now().Format(time.RFC3339Nano), cp.Name, c.Message))
						mu.Unlock()
					}
				}
				time.Sleep(500 * time.Millisecond)
			}
		}()
		var out string
		measure("kind: provider upgraded to a second release → rollout done", func() {
			out, err = ke.UpgradeProvider(suiteCtx, ke.Release, second)
			Expect(err).NotTo(HaveOccurred(), out)
		})
		var pod corev1.Pod
		waitUntil(2*time.Minute, 500*time.Millisecond, func(g Gomega) {
			var pods corev1.PodList
			g.Expect(ke.Platform.Client.List(suiteCtx, &pods, client.InNamespace(env.KindPodNamespace),
				client.MatchingLabels{"app.kubernetes.io/name": "service-provider-kro"})).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(1), "the old pod is gone")
			g.Expect(pods.Items[0].Spec.Containers[0].Image).To(Equal(second.PinnedImage()))
			g.Expect(pods.Items[0].Status.ContainerStatuses[0].ImageID).To(HaveSuffix(second.Digest))
			pod = pods.Items[0]
			lw.mu.Lock()
			defer lw.mu.Unlock()
			g.Expect(lw.holders).NotTo(BeEmpty())
			g.Expect(lw.holders[len(lw.holders)-1]).To(HavePrefix(pod.Name), "the new pod leads: %v", lw.holders)
		})
		// Holding the Lease, the new leader syncs its caches before its workers start: on a
		// busy machine that takes seconds.
		var started time.Time
		Eventually(func() (err error) {
			started, err = workersStarted(ke, pod.Name)
			return err
		}).WithContext(suiteCtx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		// Ten more seconds: the new leader has re-verified both Kros by then.
		time.Sleep(10 * time.Second)
		stop()
		lw.mu.Lock()
		released, holders := lw.released, lw.holders
		lw.mu.Unlock()
		handover := started.Sub(released)
		fmt.Fprintf(GinkgoWriter, "leader hand-over: Lease holders %v; old holder gone at %s, new leader's workers started at %s: %s\n",
			holders, released.Format(time.RFC3339Nano), started.Format(time.RFC3339Nano), handover)
		recordTiming("kind: provider upgrade, old leader gone → new leader's workers started", handover)

		after := observeTenants(Default, ke, cp1, cp2)
		Expect(after).To(Equal(before), "no HelmRelease or OCIRepository written, no kro pod replaced")
		mu.Lock()
		defer mu.Unlock()
		Expect(notReady).To(BeEmpty(), "a Kro was not Ready during the upgrade")
	})
}
