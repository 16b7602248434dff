package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	commonapi "github.com/openmcp-project/openmcp-operator/api/common"
	providerv1alpha1 "github.com/openmcp-project/openmcp-operator/api/provider/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/config"
	"github.com/openmcp-project/service-provider-kro/config/rbac"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// TestUnderOpenMCP runs `init` and `run` as openmcp-operator starts them: its exact
// arguments, the platform cluster as the ambient configuration (KUBECONFIG, bound to
// cluster-admin as openmcp binds a provider's ServiceAccount), POD_NAMESPACE, and no
// onboarding kubeconfig. The test plays openmcp's part: it grants the provider's
// ClusterRequests and AccessRequests with tokens of ServiceAccounts that hold exactly the
// rights requested, and rotates them, revoking the old ones.
//
// It shows that init and run each request the onboarding cluster with exactly the rights
// of the generated RBAC, that init registers the Kro kind on the ServiceProvider, that a
// Kro goes through its whole life with those rights, that a rotated onboarding token is
// used at once without a restart, and that a rotated ControlPlane access secret
// re-engages the ControlPlane within seconds.
func TestUnderOpenMCP(t *testing.T) {
	e := startRBACEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	dir := t.TempDir()
	platformKubeconfig := filepath.Join(dir, "platform.kubeconfig")
	g.Expect(os.WriteFile(platformKubeconfig, e.platform.Kubeconfig, 0o600)).To(Succeed())
	t.Setenv("KUBECONFIG", platformKubeconfig)
	t.Setenv("POD_NAMESPACE", config.Namespace)
	openmcp := &fakeOpenMCP{platform: e.platform.Client, onboarding: e.onboarding}
	g.Expect(e.onboarding.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fakeGrantNamespace}})).To(Succeed())

	// The ServiceProvider openmcp-operator deploys the provider from.
	addrs, err := testenv.FreeLoopbackAddrs(2)
	g.Expect(err).NotTo(HaveOccurred())
	metricsPort, err := strconv.Atoi(addrs[0][strings.LastIndex(addrs[0], ":")+1:])
	g.Expect(err).NotTo(HaveOccurred())
	spec := providerv1alpha1.DeploymentSpec{
		Image:       "registry.example.com/service-provider-kro:v0.0.0",
		RunCommand:  []string{"run", "--health-probe-bind-address=" + addrs[1]},
		Verbosity:   "DEBUG",
		RunReplicas: 2,
		Metrics:     &providerv1alpha1.MetricsConfiguration{Port: ptr.To(int32(metricsPort))},
	}
	sp := &providerv1alpha1.ServiceProvider{
		ObjectMeta: metav1.ObjectMeta{Name: rbacProvider},
		Spec:       providerv1alpha1.ServiceProviderSpec{DeploymentSpec: spec},
	}
	g.Expect(e.platform.Client.Create(ctx, sp)).To(Succeed())
	// openmcp-operator reports on the ServiceProvider before it starts the init Job.
	sp.Status.ObservedGeneration = sp.Generation
	sp.Status.Phase = "Progressing"
	g.Expect(e.platform.Client.Status().Update(ctx, sp)).To(Succeed())

	t.Run("init requests the onboarding cluster for CRDs only and registers the Kro kind", func(t *testing.T) {
		g := NewWithT(t)
		args := openmcpInitArgs(spec, "test", rbacProvider)
		var out, errOut bytes.Buffer
		done := make(chan error, 1)
		go func() { done <- dispatch(ctx, args, &out, &errOut) }()
		rules := openmcp.grantOnboarding(g, clusters.OnboardingInitRequest, 1)
		g.Expect(rules).To(Equal(rbac.InitRules()), "init asks for exactly the CRD rights")
		g.Eventually(done, rbacTimeout).Should(Receive(BeNil()), errOut.String())
		g.Expect(out.String()).To(ContainSubstring("onboarding cluster: CRDs kroes.kro.services.open-control-plane.io"))
		g.Expect(out.String()).To(ContainSubstring("ServiceProvider kro serves kro.services.open-control-plane.io/v1alpha1 Kro"))
		sp := &providerv1alpha1.ServiceProvider{}
		g.Expect(e.platform.Client.Get(ctx, client.ObjectKey{Name: rbacProvider}, sp)).To(Succeed())
		g.Expect(sp.Status.Resources).To(ConsistOf(metav1.GroupVersionKind{Group: "kro.services.open-control-plane.io", Version: "v1alpha1", Kind: "Kro"}))
	})

	args := openmcpRunArgs(spec, "test", rbacProvider)
	stop, done := e.startProvider(t, args)
	generated, err := rbac.OnboardingRules()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(openmcp.grantOnboarding(g, clusters.OnboardingRunRequest, 1)).To(Equal(generated), "run asks for exactly the generated onboarding rights")

	var cpAccess *clustersv1alpha1.AccessRequest
	e.lifecycle(t, func() { e.stop(t, stop, done) }, func(g Gomega, tenant string) {
		// openmcp rotates the onboarding token and revokes the old one: from now on every
		// write of the provider on the onboarding cluster needs the new token.
		openmcp.rotateOnboarding(g, clusters.OnboardingRunRequest, 2)
		openmcp.revoke(g, e.onboarding, clusters.OnboardingRequestName(rbacProvider, clusters.OnboardingRunRequest), 1)
		g.Eventually(e.logs.String, rbacTimeout, rbacInterval).Should(ContainSubstring("the onboarding token was rotated; using the new one"))
		cpAccess = openmcp.grantControlPlane(g, tenant, e.controlPlane, 1)
	}, func(g Gomega) {
		// openmcp rotates the ControlPlane's access secret in place and revokes the old
		// token. A deleted copy on the ControlPlane comes back only through the new one.
		engaged := func() int { return strings.Count(e.logs.String(), `"msg":"engaged"`) }
		before := engaged()
		openmcp.rotateControlPlane(g, cpAccess, e.controlPlane, 2)
		rotated := time.Now()
		// The old token still works, and nothing else happens that would reconcile the
		// Kro (its poll interval is a minute): only the watch on the access secret can
		// re-engage it this soon.
		g.Eventually(engaged, 10*time.Second, rbacInterval).Should(BeNumerically(">", before), "the rotated secret re-engages the ControlPlane")
		t.Logf("ControlPlane access rotated → re-engaged: %s", time.Since(rotated).Round(time.Millisecond))
		openmcp.revoke(g, e.controlPlane, "controlplane-access", 1)
		copyKey := client.ObjectKey{Namespace: owned.KroNamespace, Name: rbacPullSecret}
		g.Eventually(func(g Gomega) {
			s := &corev1.Secret{}
			g.Expect(e.controlPlane.Client.Get(ctx, copyKey, s)).To(Succeed())
			g.Expect(e.controlPlane.Client.Delete(ctx, s)).To(Succeed())
		}, rbacTimeout, rbacInterval).Should(Succeed())
		g.Eventually(func() error { return e.controlPlane.Client.Get(ctx, copyKey, &corev1.Secret{}) }, 20*time.Second, rbacInterval).Should(Succeed(),
			"the copy is restored with the rotated ControlPlane credentials")
		t.Logf("ControlPlane access rotated → deleted copy restored through the new token: %s", time.Since(rotated).Round(time.Millisecond))
	}, nil)
	g.Expect(e.logs.String()).NotTo(ContainSubstring("restarts and requests the onboarding cluster anew"), "a token rotation needs no restart")
}

// fakeGrantNamespace holds the ServiceAccounts fakeOpenMCP issues tokens for.
const fakeGrantNamespace = "openmcp-grants"

// fakeOpenMCP grants the provider's requests as openmcp and a cluster provider do, with
// ServiceAccount tokens that carry exactly the requested rights.
type fakeOpenMCP struct {
	platform   client.Client
	onboarding *testenv.Cluster
}

// grantOnboarding waits for the provider's onboarding ClusterRequest and AccessRequest
// (local name), grants both and returns the rules the AccessRequest asked for.
func (f *fakeOpenMCP) grantOnboarding(g Gomega, localName string, serial int) []rbacv1.PolicyRule {
	ctx := context.Background()
	key := client.ObjectKey{Namespace: config.Namespace, Name: clusters.OnboardingRequestName(rbacProvider, localName)}
	cr := &clustersv1alpha1.ClusterRequest{}
	g.Eventually(func() error { return f.platform.Get(ctx, key, cr) }, rbacTimeout, rbacInterval).Should(Succeed(), "ClusterRequest %s", key)
	g.Expect(cr.Spec.Purpose).To(Equal(clustersv1alpha1.PURPOSE_ONBOARDING))
	cr.Status.Phase = clustersv1alpha1.REQUEST_GRANTED
	cr.Status.Cluster = &commonapi.ObjectReference{Name: "onboarding", Namespace: config.Namespace}
	g.Expect(f.platform.Status().Update(ctx, cr)).To(Succeed())

	ar := &clustersv1alpha1.AccessRequest{}
	g.Eventually(func() error { return f.platform.Get(ctx, key, ar) }, rbacTimeout, rbacInterval).Should(Succeed(), "AccessRequest %s", key)
	g.Expect(ar.Spec.RequestRef).To(Equal(&commonapi.ObjectReference{Name: key.Name, Namespace: key.Namespace}))
	g.Expect(ar.Spec.Token).NotTo(BeNil())
	var rules []rbacv1.PolicyRule
	for _, p := range ar.Spec.Token.Permissions {
		rules = append(rules, p.Rules...)
	}
	kubeconfig := f.issue(g, f.onboarding, key.Name, serial, rules)
	g.Expect(f.platform.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name + "-access", Namespace: key.Namespace},
		Data:       map[string][]byte{clusters.KubeconfigKey: kubeconfig},
	})).To(Succeed())
	ar.Status.Phase = clustersv1alpha1.REQUEST_GRANTED
	ar.Status.ObservedGeneration = ar.Generation
	ar.Status.SecretRef = &commonapi.LocalObjectReference{Name: key.Name + "-access"}
	g.Expect(f.platform.Status().Update(ctx, ar)).To(Succeed())
	return rules
}

// rotateOnboarding writes a token of a new ServiceAccount into the onboarding access
// secret, as a cluster provider refreshes it before the old one expires.
func (f *fakeOpenMCP) rotateOnboarding(g Gomega, localName string, serial int) {
	name := clusters.OnboardingRequestName(rbacProvider, localName)
	f.rotate(g, f.onboarding, client.ObjectKey{Namespace: config.Namespace, Name: name + "-access"}, name, serial)
}

// controlPlaneExists plays openmcp's ClusterRequest of the ControlPlane an AccessRequest
// refers to: while it exists, the ControlPlane is not gone.
func controlPlaneExists(g Gomega, platform client.Client, ar *clustersv1alpha1.AccessRequest) {
	cr := &clustersv1alpha1.ClusterRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ar.Spec.RequestRef.Namespace, Name: ar.Spec.RequestRef.Name},
		Spec:       clustersv1alpha1.ClusterRequestSpec{Purpose: "mcp"},
	}
	g.Expect(client.IgnoreAlreadyExists(platform.Create(context.Background(), cr))).To(Succeed())
}

// grantControlPlane grants the provider's AccessRequest in the tenant namespace with a
// cluster-admin ServiceAccount token of the ControlPlane.
func (f *fakeOpenMCP) grantControlPlane(g Gomega, tenant string, cp *testenv.Cluster, serial int) *clustersv1alpha1.AccessRequest {
	ctx := context.Background()
	ar := &clustersv1alpha1.AccessRequest{}
	g.Eventually(func(g Gomega) {
		list := &clustersv1alpha1.AccessRequestList{}
		g.Expect(f.platform.List(ctx, list, client.InNamespace(tenant))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		*ar = list.Items[0]
	}, rbacTimeout, rbacInterval).Should(Succeed(), "the provider's AccessRequest for the ControlPlane")
	controlPlaneExists(g, f.platform, ar)
	g.Expect(client.IgnoreAlreadyExists(cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fakeGrantNamespace}}))).To(Succeed())
	kubeconfig := f.issue(g, cp, "controlplane-access", serial, []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}, {NonResourceURLs: []string{"*"}, Verbs: []string{"*"}}})
	g.Expect(f.platform.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "controlplane-access", Namespace: tenant},
		Data:       map[string][]byte{clusters.KubeconfigKey: kubeconfig},
	})).To(Succeed())
	ar.Status.Phase = clustersv1alpha1.REQUEST_GRANTED
	ar.Status.ObservedGeneration = ar.Generation
	ar.Status.SecretRef = &commonapi.LocalObjectReference{Name: "controlplane-access"}
	g.Expect(f.platform.Status().Update(ctx, ar)).To(Succeed())
	return ar
}

func (f *fakeOpenMCP) rotateControlPlane(g Gomega, ar *clustersv1alpha1.AccessRequest, cp *testenv.Cluster, serial int) {
	f.rotate(g, cp, client.ObjectKey{Namespace: ar.Namespace, Name: ar.Status.SecretRef.Name}, "controlplane-access", serial)
}

func (f *fakeOpenMCP) rotate(g Gomega, target *testenv.Cluster, secret client.ObjectKey, name string, serial int) {
	ctx := context.Background()
	role := &rbacv1.ClusterRole{}
	g.Expect(target.Client.Get(ctx, client.ObjectKey{Name: name}, role)).To(Succeed())
	kubeconfig := f.issue(g, target, name, serial, role.Rules)
	s := &corev1.Secret{}
	g.Expect(f.platform.Get(ctx, secret, s)).To(Succeed())
	s.Data[clusters.KubeconfigKey] = kubeconfig
	g.Expect(f.platform.Update(ctx, s)).To(Succeed())
}

// revoke deletes the ServiceAccount <name>-<serial>, which invalidates its tokens.
func (f *fakeOpenMCP) revoke(g Gomega, target *testenv.Cluster, name string, serial int) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: fakeGrantNamespace, Name: fmt.Sprintf("%s-%d", name, serial)}}
	g.Expect(target.Client.Delete(context.Background(), sa)).To(Succeed())
}

// issue creates the ServiceAccount <name>-<serial> on the target cluster, bound to the
// ClusterRole <name> with rules, and returns a kubeconfig with a token of it.
func (f *fakeOpenMCP) issue(g Gomega, target *testenv.Cluster, name string, serial int, rules []rbacv1.PolicyRule) []byte {
	ctx := context.Background()
	sa := fmt.Sprintf("%s-%d", name, serial)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	if err := target.Client.Create(ctx, role); apierrors.IsAlreadyExists(err) {
		g.Expect(target.Client.Get(ctx, client.ObjectKeyFromObject(role), role)).To(Succeed())
		g.Expect(role.Rules).To(Equal(rules))
	} else {
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(target.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: fakeGrantNamespace}})).To(Succeed())
	g.Expect(target.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: fakeGrantNamespace, Name: sa}},
	})).To(Succeed())
	kubeconfig, err := target.ServiceAccountKubeconfig(ctx, fakeGrantNamespace, sa, time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	return kubeconfig
}
