package controllers

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/openmcp-project/openmcp-operator/api/constants"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/pullsecrets"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// The integration tests below run a ProviderConfigReconciler of their own, on the suite's
// onboarding and platform clusters, for a ProviderConfig and a provider namespace of their
// own, so that what the suite's provider does with ProviderConfig "kro" does not meet
// them. Their Kros carry openmcp.cloud/operation=ignore, so that the suite's Kro
// reconciler leaves them (and their status, which the tests set) alone.

// pcEnv is one test's ProviderConfig reconciler and what it needs.
type pcEnv struct {
	name, podNamespace string
	platform           *countingClient
	// write is what ShouldWrite returns.
	write atomic.Bool
}

// startProviderConfigReconciler runs a ProviderConfigReconciler for a ProviderConfig
// named name, with its pull secrets in a fresh namespace on the platform cluster, until
// the test ends.
func startProviderConfigReconciler(t *testing.T, g Gomega, gate bool) *pcEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e := &pcEnv{name: uniq("pc"), podNamespace: uniq("pc-ns")}
	e.write.Store(true)
	g.Expect(platform.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.podNamespace}})).To(Succeed())

	mgr := newTestManager(g, onboarding.Config)
	pl, err := cluster.New(platform.Config, func(co *cluster.Options) {
		co.Scheme = clusters.Scheme
		co.Cache = PlatformCacheOptions(e.podNamespace)
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mgr.Add(pl)).To(Succeed())
	e.platform = &countingClient{Client: pl.GetClient()}
	r := &ProviderConfigReconciler{
		Platform:     e.platform,
		Onboarding:   mgr.GetClient(),
		Recorder:     pl.GetEventRecorder("pc-test"),
		ProviderName: e.name,
		PodNamespace: e.podNamespace,
	}
	if gate {
		r.ShouldWrite = e.write.Load
	}
	g.Expect(r.SetupWithManager(mgr, pl)).To(Succeed())
	runTestManager(t, ctx, cancel, mgr)
	return e
}

// countingClient counts the reads of ProviderConfigs (one per reconcile that gets past
// the gate) and the status patches.
type countingClient struct {
	client.Client
	gets, patches atomic.Int32
}

func (c *countingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*v1alpha1.ProviderConfig); ok {
		c.gets.Add(1)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c *countingClient) Status() client.SubResourceWriter {
	return countingStatus{SubResourceWriter: c.Client.Status(), n: &c.patches}
}

type countingStatus struct {
	client.SubResourceWriter
	n *atomic.Int32
}

func (s countingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.n.Add(1)
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

func (e *pcEnv) create(g Gomega, versions ...v1alpha1.KroVersion) {
	g.Expect(platform.Client.Create(context.Background(), &v1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: e.name},
		Spec:       v1alpha1.ProviderConfigSpec{PollInterval: &metav1.Duration{Duration: suitePollInterval}, Versions: versions},
	})).To(Succeed())
}

func (e *pcEnv) get(g Gomega) *v1alpha1.ProviderConfig {
	pc := &v1alpha1.ProviderConfig{}
	g.Expect(platform.Client.Get(context.Background(), client.ObjectKey{Name: e.name}, pc)).To(Succeed())
	return pc
}

func (e *pcEnv) secret(g Gomega, name string, typ corev1.SecretType) {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.podNamespace},
		Type:       typ,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"example.com":{"auth":"` + pcSecretPayload + `"}}}`)},
	}
	g.Expect(platform.Client.Create(context.Background(), s)).To(Succeed())
}

// pcSecretPayload is in every secret of these tests, and must never show in a status
// or an event.
const pcSecretPayload = "c2VjcmV0LXBheWxvYWQtNzQ2MQ=="

// eventuallyReady waits until the ProviderConfig's Ready has status and reason and its
// message contains parts, with the phase and observedGeneration that go with it.
func (e *pcEnv) eventuallyReady(g Gomega, status metav1.ConditionStatus, reason string, parts ...string) *v1alpha1.ProviderConfig {
	var pc *v1alpha1.ProviderConfig
	g.Eventually(func(g Gomega) {
		pc = e.get(g)
		c := meta.FindStatusCondition(pc.Status.Conditions, v1alpha1.ConditionReady)
		g.Expect(c).NotTo(BeNil(), "Ready in %v", pc.Status.Conditions)
		g.Expect(c.Status).To(Equal(status), c.Message)
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		g.Expect(c.ObservedGeneration).To(Equal(pc.Generation))
		g.Expect(pc.Status.ObservedGeneration).To(Equal(pc.Generation))
		for _, p := range parts {
			g.Expect(c.Message).To(ContainSubstring(p))
		}
		g.Expect(c.Message).NotTo(ContainSubstring(pcSecretPayload))
		if status == metav1.ConditionTrue {
			g.Expect(pc.Status.Phase).To(Equal(v1alpha1.PhaseReady))
		} else {
			g.Expect(pc.Status.Phase).To(Equal(v1alpha1.PhaseProgressing))
		}
	}, timeout, interval).Should(Succeed())
	return pc
}

// events returns the events on the ProviderConfig as "type/reason: message". Events on a
// cluster-scoped object are in the namespace default.
func (e *pcEnv) events(g Gomega) []string {
	list := &corev1.EventList{}
	g.Expect(platform.Client.List(context.Background(), list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
	var out []string
	for _, ev := range list.Items {
		if ev.InvolvedObject.Kind == "ProviderConfig" && ev.InvolvedObject.Name == e.name {
			out = append(out, ev.Type+"/"+ev.Reason+": "+ev.Message)
		}
	}
	return out
}

func (e *pcEnv) eventuallyEvent(g Gomega, prefix string, parts ...string) {
	g.Eventually(func(g Gomega) {
		found := false
		for _, ev := range e.events(g) {
			g.Expect(ev).NotTo(ContainSubstring(pcSecretPayload))
			ok := strings.HasPrefix(ev, prefix)
			for _, p := range parts {
				ok = ok && strings.Contains(ev, p)
			}
			found = found || ok
		}
		g.Expect(found).To(BeTrue(), "no event %q with %v among %v", prefix, parts, e.events(g))
	}, timeout, interval).Should(Succeed())
}

// ignoredKro creates a Kro that the suite's provider leaves alone, and sets its phase
// (observed for its current generation unless stale).
func ignoredKro(g Gomega, namespace, version string, phase v1alpha1.Phase, stale bool) *v1alpha1.Kro {
	ctx := context.Background()
	k := &v1alpha1.Kro{
		ObjectMeta: metav1.ObjectMeta{Name: uniq("cp"), Namespace: namespace,
			Annotations: map[string]string{constants.OperationAnnotation: constants.OperationAnnotationValueIgnore}},
		Spec: v1alpha1.KroSpec{Version: version},
	}
	g.Expect(onboarding.Client.Create(ctx, k)).To(Succeed())
	if phase != "" {
		base := k.DeepCopy()
		k.Status.Phase = phase
		k.Status.ObservedGeneration = k.Generation
		if stale {
			k.Status.ObservedGeneration = k.Generation - 1
		}
		g.Expect(onboarding.Client.Status().Patch(ctx, k, client.MergeFrom(base))).To(Succeed())
	}
	return k
}

// TestProviderConfigStatusPullSecrets: Ready names the version and the secret that is
// missing, then of the wrong type, and turns True once the secret is right; events follow
// Ready's transitions, and neither carries a secret's content.
func TestProviderConfigStatusPullSecrets(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	e := startProviderConfigReconciler(t, g, false)
	vA, vB := uniq("va"), uniq("vb")
	e.secret(g, "chart-a", corev1.SecretTypeDockerConfigJson)
	e.create(g,
		v1alpha1.KroVersion{Version: vA, ChartVersion: "0.9.3", ChartPullSecret: "chart-a"},
		v1alpha1.KroVersion{Version: vB, ChartVersion: "0.9.4", HelmValues: helmValues("images-b")},
	)

	pc := e.eventuallyReady(g, metav1.ConditionFalse, v1alpha1.ReasonPullSecretMissing,
		`secret "images-b" (image pull secret of version `+vB+`) not found in namespace `+e.podNamespace)
	g.Expect(meta.FindStatusCondition(pc.Status.Conditions, v1alpha1.ConditionReady).Message).NotTo(ContainSubstring(vA))
	logStatus(t, g, pc)
	e.eventuallyEvent(g, "Warning/"+v1alpha1.ReasonPullSecretMissing, vB, "images-b")

	e.secret(g, "images-b", corev1.SecretTypeOpaque)
	e.eventuallyReady(g, metav1.ConditionFalse, v1alpha1.ReasonPullSecretWrongType,
		`secret "images-b" (image pull secret of version `+vB+`) in namespace `+e.podNamespace+` has type "Opaque"`)
	e.eventuallyEvent(g, "Warning/"+v1alpha1.ReasonPullSecretWrongType, vB, "images-b")

	g.Expect(platform.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "images-b", Namespace: e.podNamespace}})).To(Succeed())
	e.eventuallyReady(g, metav1.ConditionFalse, v1alpha1.ReasonPullSecretMissing, "images-b")
	e.secret(g, "images-b", corev1.SecretTypeDockerConfigJson)
	pc = e.eventuallyReady(g, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess, vA, vB)
	e.eventuallyEvent(g, "Normal/"+v1alpha1.ReasonReconcileSuccess, vA, vB)
	logStatus(t, g, pc)
	t.Logf("events:\n%s", strings.Join(e.events(g), "\n"))
}

func logStatus(t *testing.T, g Gomega, pc *v1alpha1.ProviderConfig) {
	t.Helper()
	out, err := yaml.Marshal(pc.Status)
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("status:\n%s", out)
}

// TestProviderConfigStatusCountsKros: each version counts the Kros that select it and
// those of them Ready for their current generation; a version nobody selects shows 0;
// Kros of a version not on offer are counted apart; moving or deleting a Kro moves the
// counts.
func TestProviderConfigStatusCountsKros(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	e := startProviderConfigReconciler(t, g, false)
	vA, vB, vC := uniq("va"), uniq("vb"), uniq("vc")
	e.create(g,
		v1alpha1.KroVersion{Version: vA, ChartVersion: "0.9.3"},
		v1alpha1.KroVersion{Version: vB, ChartVersion: "0.9.4"},
		v1alpha1.KroVersion{Version: vC, ChartVersion: "0.9.5"},
	)
	e.eventuallyReady(g, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)

	ns := newNamespace(t, g)
	ignoredKro(g, ns, vA, v1alpha1.PhaseReady, false)
	ignoredKro(g, ns, vA, v1alpha1.PhaseReady, true) // Ready for an older generation: not counted Ready
	moving := ignoredKro(g, ns, vA, v1alpha1.PhaseProgressing, false)
	ignoredKro(g, ns, vB, "", false)
	unknown := ignoredKro(g, ns, uniq("v-not-offered"), v1alpha1.PhaseReady, false)

	// Kros that other tests left on the onboarding cluster ask for versions this
	// ProviderConfig does not offer, so they count as unknown too.
	counts := func(a, aReady, b, bReady, c int32, unknownExists bool) func(Gomega) {
		return func(g Gomega) {
			list := &v1alpha1.KroList{}
			g.Expect(onboarding.Client.List(ctx, list)).To(Succeed())
			var others int32
			found := false
			for _, k := range list.Items {
				if k.Spec.Version != vA && k.Spec.Version != vB && k.Spec.Version != vC {
					others++
				}
				found = found || k.Name == unknown.Name && k.Namespace == unknown.Namespace
			}
			g.Expect(found).To(Equal(unknownExists))
			pc := e.get(g)
			g.Expect(versionCounts(pc.Status.Versions)).To(Equal([]v1alpha1.VersionStatus{
				{Version: vA, Kros: a, Ready: aReady},
				{Version: vB, Kros: b, Ready: bReady},
				{Version: vC, Kros: c, Ready: 0},
			}))
			g.Expect(pc.Status.UnknownVersionKros).To(Equal(others))
			g.Expect(pc.Status.Kros).To(Equal(int32(len(list.Items))))
		}
	}
	g.Eventually(counts(3, 1, 1, 0, 0, true), timeout, interval).Should(Succeed())

	// A Kro moves to another version.
	g.Expect(onboarding.Client.Get(ctx, client.ObjectKeyFromObject(moving), moving)).To(Succeed())
	moving.Spec.Version = vB
	g.Expect(onboarding.Client.Update(ctx, moving)).To(Succeed())
	g.Eventually(counts(2, 1, 2, 0, 0, true), timeout, interval).Should(Succeed())

	// Kros go.
	g.Expect(onboarding.Client.Delete(ctx, unknown)).To(Succeed())
	g.Expect(onboarding.Client.Delete(ctx, moving)).To(Succeed())
	g.Eventually(counts(2, 1, 1, 0, 0, false), timeout, interval).Should(Succeed())
	logStatus(t, g, e.get(g))
}

// TestProviderConfigStatusIdle: reconciles with nothing new write nothing: the
// reconciler runs (it reads the ProviderConfig) but sends no patch, and the
// ProviderConfig's resourceVersion stays.
func TestProviderConfigStatusIdle(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	e := startProviderConfigReconciler(t, g, false)
	e.create(g, v1alpha1.KroVersion{Version: uniq("v"), ChartVersion: "0.9.3", ChartPullSecret: "missing"})
	e.eventuallyReady(g, metav1.ConditionFalse, v1alpha1.ReasonPullSecretMissing, `secret "missing"`)
	// Give the reconcile that the status write brings back time to pass.
	time.Sleep(time.Second)

	// Something the reconciler watches changes without changing the status: an
	// annotation on the ProviderConfig, and a secret nobody uses.
	patches := e.platform.patches.Load()
	gets := e.platform.gets.Load()
	pc := e.get(g)
	pc.Annotations = map[string]string{"example.com/touch": "1"}
	g.Expect(platform.Client.Update(ctx, pc)).To(Succeed())
	rv := pc.ResourceVersion
	g.Eventually(func() int32 { return e.platform.gets.Load() }, timeout, interval).Should(BeNumerically(">", gets), "the reconciler runs for the annotation")
	gets = e.platform.gets.Load()
	e.secret(g, "unused", corev1.SecretTypeDockerConfigJson)
	g.Eventually(func() int32 { return e.platform.gets.Load() }, timeout, interval).Should(BeNumerically(">", gets), "the reconciler runs for the secret")

	g.Consistently(func(g Gomega) {
		g.Expect(e.get(g).ResourceVersion).To(Equal(rv))
		g.Expect(e.platform.patches.Load()).To(Equal(patches))
	}, 3*time.Second, 200*time.Millisecond).Should(Succeed())
}

// TestProviderConfigStatusShouldWrite: while ShouldWrite says false, the reconciler does
// nothing; once it says true, the next event writes the status.
func TestProviderConfigStatusShouldWrite(t *testing.T) {
	g := withClusters(t)
	ctx := context.Background()
	e := startProviderConfigReconciler(t, g, true)
	e.write.Store(false)
	e.create(g, v1alpha1.KroVersion{Version: uniq("v"), ChartVersion: "0.9.3"})
	g.Consistently(func(g Gomega) {
		pc := e.get(g)
		g.Expect(pc.Status.Conditions).To(BeEmpty())
		g.Expect(pc.Status.ObservedGeneration).To(BeZero())
		g.Expect(e.platform.patches.Load()).To(BeZero())
		g.Expect(e.platform.gets.Load()).To(BeZero())
		g.Expect(e.events(g)).To(BeEmpty())
	}, 3*time.Second, 200*time.Millisecond).Should(Succeed())

	e.write.Store(true)
	pc := e.get(g)
	pc.Annotations = map[string]string{"example.com/touch": "1"}
	g.Expect(platform.Client.Update(ctx, pc)).To(Succeed())
	e.eventuallyReady(g, metav1.ConditionTrue, v1alpha1.ReasonReconcileSuccess)
}

// TestProviderConfigStatusWiredInSetup: the provider that Setup builds writes the status
// of its ProviderConfig.
func TestProviderConfigStatusWiredInSetup(t *testing.T) {
	g := withClusters(t)
	g.Eventually(func(g Gomega) {
		pc := &v1alpha1.ProviderConfig{}
		g.Expect(platform.Client.Get(context.Background(), client.ObjectKey{Name: providerName}, pc)).To(Succeed())
		g.Expect(pc.Status.ObservedGeneration).To(Equal(pc.Generation))
		g.Expect(meta.FindStatusCondition(pc.Status.Conditions, v1alpha1.ConditionReady)).NotTo(BeNil())
		g.Expect(pc.Status.Versions).NotTo(BeEmpty())
	}, timeout, interval).Should(Succeed())
}

// TestProviderConfigStatusPure covers the status function without an API server.
func TestProviderConfigStatusPure(t *testing.T) {
	g := NewWithT(t)
	pc := &v1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "kro", Generation: 3},
		Spec:       v1alpha1.ProviderConfigSpec{Versions: []v1alpha1.KroVersion{{Version: "v1"}, {Version: "v2"}}},
	}
	kro := func(version string, phase v1alpha1.Phase, gen, observed int64) v1alpha1.Kro {
		return v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Spec: v1alpha1.KroSpec{Version: version},
			Status: v1alpha1.KroStatus{CommonStatus: v1alpha1.CommonStatus{Phase: phase, ObservedGeneration: observed}}}
	}
	obs := providerConfigObservation{
		problems: []pullsecrets.SecretProblem{
			{Reason: v1alpha1.ReasonPullSecretWrongType, Message: "secret a of version v2 has type Opaque"},
			{Reason: v1alpha1.ReasonPullSecretMissing, Message: "secret b of version v2 not found"},
		},
		kros: []v1alpha1.Kro{kro("v1", v1alpha1.PhaseReady, 2, 2), kro("v1", v1alpha1.PhaseReady, 2, 1), kro("v9", v1alpha1.PhaseReady, 1, 1)},
	}
	st, _ := providerConfigStatus(pc, obs)
	g.Expect(st.ObservedGeneration).To(Equal(int64(3)))
	g.Expect(st.Phase).To(Equal(v1alpha1.PhaseProgressing))
	g.Expect(versionCounts(st.Versions)).To(Equal([]v1alpha1.VersionStatus{{Version: "v1", Kros: 2, Ready: 1}, {Version: "v2"}}))
	g.Expect(st.Kros).To(Equal(int32(3)))
	g.Expect(st.UnknownVersionKros).To(Equal(int32(1)))
	ready := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(Equal(v1alpha1.ReasonPullSecretWrongType), "the first problem's reason")
	g.Expect(ready.Message).To(Equal("secret a of version v2 has type Opaque; secret b of version v2 not found"))
	g.Expect(readyTransitionEvent(nil, ready)).To(Equal(&step.KroEvent{Type: corev1.EventTypeWarning, Reason: v1alpha1.ReasonPullSecretWrongType, Action: v1alpha1.ConditionReady, Note: ready.Message}))

	// Another message under the same status keeps the transition time and raises no event.
	old := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	st.Conditions[0].LastTransitionTime = old
	pc.Status = st
	obs.problems = obs.problems[1:]
	st2, _ := providerConfigStatus(pc, obs)
	ready2 := meta.FindStatusCondition(st2.Conditions, v1alpha1.ConditionReady)
	g.Expect(ready2.LastTransitionTime).To(Equal(old))
	g.Expect(ready2.Reason).To(Equal(v1alpha1.ReasonPullSecretMissing))
	g.Expect(readyTransitionEvent(ready, ready2)).NotTo(BeNil(), "the reason changed")
	g.Expect(readyTransitionEvent(ready2, ready2)).To(BeNil())

	// Fixed: Ready turns True, with a new transition time and a Normal event.
	pc.Status = st2
	obs.problems = nil
	st3, _ := providerConfigStatus(pc, obs)
	ready3 := meta.FindStatusCondition(st3.Conditions, v1alpha1.ConditionReady)
	g.Expect(ready3.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(ready3.LastTransitionTime).NotTo(Equal(old))
	g.Expect(st3.Phase).To(Equal(v1alpha1.PhaseReady))
	g.Expect(readyTransitionEvent(ready2, ready3).Type).To(Equal(corev1.EventTypeNormal))

	// Being deleted.
	pc.DeletionTimestamp = ptr.To(metav1.Now())
	st4, _ := providerConfigStatus(pc, obs)
	g.Expect(st4.Phase).To(Equal(v1alpha1.PhaseTerminating))
	g.Expect(meta.FindStatusCondition(st4.Conditions, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonTerminating))
}

// versionCounts keeps only the counts of the versions' status; the rollout's fields have
// tests of their own (rollout_test.go).
func versionCounts(vs []v1alpha1.VersionStatus) []v1alpha1.VersionStatus {
	out := make([]v1alpha1.VersionStatus, 0, len(vs))
	for _, v := range vs {
		out = append(out, v1alpha1.VersionStatus{Version: v.Version, Kros: v.Kros, Ready: v.Ready})
	}
	return out
}
