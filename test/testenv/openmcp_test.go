//go:build e2e

package testenv

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	providerv1alpha1 "github.com/openmcp-project/openmcp-operator/api/provider/v1alpha1"

	"github.com/openmcp-project/service-provider-kro/hack/image/ociimage"
)

// TestOpenMCPOperatorWithClusterProvider runs the real openmcp-operator against two API
// servers with the ClusterProvider emulator: openmcp's ControlPlane controller gets its
// onboarding access (its `mcp init` only finishes once both requests are granted), the
// token carries exactly the permissions asked for, and RotateAccess revokes the old token.
func TestOpenMCPOperatorWithClusterProvider(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dir := testDir(t, "openmcp-test")
	cs, err := StartClusters(ctx, ClusterOptions{Name: "platform"}, ClusterOptions{Name: "onboarding"})
	if err != nil {
		t.Fatal(err)
	}
	defer StopClusters(cs...)
	platform, onboarding := cs[0], cs[1]
	start := time.Now()
	cp, stopOpenMCP := startOpenMCPWithClusterProvider(ctx, t, platform, onboarding, dir)
	defer stopOpenMCP()
	t.Logf("openmcp-operator init, run, mcp init and mcp run in %s", time.Since(start).Round(100*time.Millisecond))

	pc, err := client.New(platform.Config, client.Options{Scheme: OpenMCPScheme})
	if err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: OpenMCPNamespace, Name: MCPControllerName + "--onboarding-init"}
	ar := &clustersv1alpha1.AccessRequest{}
	if err := pc.Get(ctx, key, ar); err != nil {
		t.Fatal(err)
	}
	if !ar.Status.IsGranted() || ar.Labels[clustersv1alpha1.ProviderLabel] != ClusterProviderName {
		t.Fatalf("AccessRequest %s: labels %v status %+v", key, ar.Labels, ar.Status)
	}
	access := func() client.Client {
		secret := &corev1.Secret{}
		if err := pc.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: ar.Status.SecretRef.Name}, secret); err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["kubeconfig"])
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(cfg, client.Options{Scheme: OpenMCPScheme})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	old := access()
	if err := old.List(ctx, &apiextensionsv1.CustomResourceDefinitionList{}); err != nil {
		t.Errorf("the init token cannot list CRDs, which it asked for: %v", err)
	}
	if err := old.List(ctx, &corev1.SecretList{}); !apierrors.IsForbidden(err) {
		t.Errorf("the init token lists secrets, which it did not ask for: %v", err)
	}
	if err := cp.RotateAccess(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := pc.Get(ctx, key, ar); err != nil {
		t.Fatal(err)
	}
	if err := access().List(ctx, &apiextensionsv1.CustomResourceDefinitionList{}); err != nil {
		t.Errorf("the rotated token does not work: %v", err)
	}
	// The API server learns of the deleted ServiceAccount through its informer: a moment.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := old.List(ctx, &apiextensionsv1.CustomResourceDefinitionList{})
		if apierrors.IsUnauthorized(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old token still authenticates 10s after the rotation: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestServiceProviderUnderOpenMCP has openmcp-operator deploy the provider from its image
// (built from this repository for this machine, pushed to an in-memory registry): the
// kubelet runs the init Job's and the Deployment's pods, and the ServiceProvider becomes
// Ready with the Kro kind registered. (The e2e suite's openmcp spec goes on from there with
// Flux and kro's chart.)
func TestServiceProviderUnderOpenMCP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dir := testDir(t, "serviceprovider-test")
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "service-provider-kro")
	buildLinuxBinary(ctx, t, root, "./cmd/service-provider-kro", bin)
	platformName := "linux/" + runtime.GOARCH
	spec := ociimage.ProviderSpec("v0.0.0-test", time.Unix(0, 0))
	spec.Platforms = []string{platformName}
	idx, err := ociimage.Build(spec, map[string]string{platformName: bin})
	if err != nil {
		t.Fatal(err)
	}
	image, cas := pushToMemoryRegistry(ctx, t, idx, "service-provider-kro:test")
	cs, err := StartClusters(ctx, ClusterOptions{Name: "platform"}, ClusterOptions{Name: "onboarding"})
	if err != nil {
		t.Fatal(err)
	}
	defer StopClusters(cs...)
	platform, onboarding := cs[0], cs[1]
	_, stopKubelet := startKubeletWithKCM(ctx, t, platform, dir, cas)
	defer stopKubelet()
	_, stopOpenMCP := startOpenMCPWithClusterProvider(ctx, t, platform, onboarding, filepath.Join(dir, "openmcp"))
	defer stopOpenMCP()
	pc, err := client.New(platform.Config, client.Options{Scheme: OpenMCPScheme})
	if err != nil {
		t.Fatal(err)
	}
	sp := &providerv1alpha1.ServiceProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "kro"},
		Spec:       providerv1alpha1.ServiceProviderSpec{DeploymentSpec: providerv1alpha1.DeploymentSpec{Image: image}},
	}
	start := time.Now()
	if err := pc.Create(ctx, sp); err != nil {
		t.Fatal(err)
	}
	for {
		if err := pc.Get(ctx, client.ObjectKeyFromObject(sp), sp); err != nil {
			t.Fatal(err)
		}
		if apimeta.IsStatusConditionTrue(sp.Status.Conditions, "Ready") {
			break
		}
		if time.Since(start) > 5*time.Minute {
			t.Fatalf("ServiceProvider not Ready after 5 minutes: %+v (pod logs in %s)", sp.Status, filepath.Join(dir, "kubelet"))
		}
		time.Sleep(time.Second)
	}
	t.Logf("ServiceProvider Ready in %s; registered kinds %v", time.Since(start).Round(100*time.Millisecond), sp.Status.Resources)
	if len(sp.Status.Resources) == 0 {
		t.Errorf("init registered no kind on the ServiceProvider")
	}
}
