package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	commonapi "github.com/openmcp-project/openmcp-operator/api/common"
	corev2alpha1 "github.com/openmcp-project/openmcp-operator/api/core/v2alpha1"
	providerv1alpha1 "github.com/openmcp-project/openmcp-operator/api/provider/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// The openmcp sandbox's tenant: one ControlPlane and its Kro.
const (
	openmcpCP        = "cp-1"
	openmcpNamespace = "project-a"
	openmcpVersion   = "v0.9.4"
)

// serveOpenMCP runs the sandbox as OpenControlPlane runs the provider: openmcp-operator
// v1.3.0 deploys it from a ServiceProvider naming its image in the sandbox's registry,
// asks a cluster provider (played by test/testenv) for the onboarding cluster and the
// ControlPlane, and a tenant's ControlPlane and Kro make kro appear on it.
func serveOpenMCP(ctx context.Context, dir string) error {
	start := time.Now()
	om, err := env.StartOpenMCP(ctx, env.OpenMCPOptions{Dir: filepath.Join(dir, envDir), Log: os.Stdout, ControlPlanes: []string{openmcpCP}})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("sandbox: stopping everything")
		if err := om.Stop(); err != nil {
			fmt.Println("sandbox: stopping:", err)
		}
	}()
	fmt.Printf("sandbox: openmcp environment up in %s\n", time.Since(start).Round(100*time.Millisecond))
	if err := writeKubeconfigs(dir, append([]*env.Cluster{om.Onboarding, om.Platform}, om.ControlPlanes...)...); err != nil {
		return err
	}
	scheme := testenv.NewOpenMCPScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, helmv2.AddToScheme, sourcev1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	onboarding, err := client.New(om.Onboarding.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	platform, err := client.New(om.Platform.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	// The platform team's part: the ServiceProvider, then, once the provider's init has
	// installed the CRDs, the ProviderConfig. The pull secret is in openmcp-operator's
	// namespace, the provider's POD_NAMESPACE. Then the tenant's part: a ControlPlane and a
	// Kro of the same name.
	if err := create(ctx, platform, &providerv1alpha1.ServiceProvider{
		ObjectMeta: metav1.ObjectMeta{Name: env.DefaultProviderName},
		Spec: providerv1alpha1.ServiceProviderSpec{DeploymentSpec: providerv1alpha1.DeploymentSpec{
			Image: om.Image, ImagePullSecrets: []commonapi.LocalObjectReference{{Name: om.PullSecretName}}, Verbosity: "INFO",
		}},
	}); err != nil {
		return err
	}
	crdCtx, cancelCRD := context.WithTimeout(ctx, 5*time.Minute)
	defer cancelCRD()
	for _, o := range []struct {
		c   client.Client
		obj client.Object
	}{
		{platform, &v1alpha1.ProviderConfig{
			ObjectMeta: metav1.ObjectMeta{Name: env.DefaultProviderName},
			Spec: v1alpha1.ProviderConfigSpec{Versions: []v1alpha1.KroVersion{{
				Version: openmcpVersion, ChartVersion: strings.TrimPrefix(openmcpVersion, "v"), ChartURL: om.ChartURL, ChartPullSecret: om.PullSecretName,
			}}},
		}},
		{onboarding, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: openmcpNamespace}}},
		{onboarding, &corev2alpha1.ControlPlane{ObjectMeta: metav1.ObjectMeta{Name: openmcpCP, Namespace: openmcpNamespace}}},
		{onboarding, &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: openmcpCP, Namespace: openmcpNamespace}, Spec: v1alpha1.KroSpec{Version: openmcpVersion}}},
	} {
		var err error
		if !poll(crdCtx, func() bool { err = create(crdCtx, o.c, o.obj); return err == nil }) {
			return fmt.Errorf("the provider's init did not install its CRDs within minutes: %w", err)
		}
	}
	if err := om.StartKroController(ctx, om.ControlPlane(openmcpCP)); err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, 8*time.Minute)
	defer cancel()
	warning := ""
	if !poll(waitCtx, func() bool {
		k := &v1alpha1.Kro{}
		return onboarding.Get(waitCtx, client.ObjectKey{Namespace: openmcpNamespace, Name: openmcpCP}, k) == nil && ready(k)
	}) {
		warning = "the Kro did not become Ready within minutes; see .sandbox/env/ (openmcp/kubelet/ has the provider's pods' logs)"
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := writeOpenMCPSummary(ctx, dir, om, onboarding, warning); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, readyFile), nil, 0o644); err != nil {
		return err
	}
	fmt.Println("sandbox: ready; stop it with `go tool task down`")
	<-ctx.Done()
	return nil
}

func writeOpenMCPSummary(ctx context.Context, dir string, om *env.OpenMCPEnv, onboarding client.Client, warning string) error {
	var b strings.Builder
	rel := func(name string) string { return filepath.Join(".sandbox", name) }
	fmt.Fprintf(&b, "openmcp-operator deploys the provider (ServiceProvider %q, image %s). Kubeconfigs:\n", env.DefaultProviderName, om.Image)
	fmt.Fprintf(&b, "  %-32s the ControlPlane %s/%s and its Kro\n", rel("onboarding.kubeconfig"), openmcpNamespace, openmcpCP)
	fmt.Fprintf(&b, "  %-32s openmcp-operator's namespace %s (the provider's pods, its AccessRequests), the ProviderConfig, Flux\n", rel("platform.kubeconfig"), om.Namespace)
	fmt.Fprintf(&b, "  %-32s the ControlPlane: kro in kro-system\n", rel(openmcpCP+".kubeconfig"))
	fmt.Fprintf(&b, "\nTry:\n")
	fmt.Fprintf(&b, "  kubectl --kubeconfig .sandbox/platform.kubeconfig get serviceproviders,jobs,deployments,pods -n %s\n", om.Namespace)
	fmt.Fprintf(&b, "  kubectl --kubeconfig .sandbox/platform.kubeconfig get accessrequests,clusterrequests -A\n")
	fmt.Fprintf(&b, "  kubectl --kubeconfig .sandbox/onboarding.kubeconfig get controlplanes,kro -A\n")
	fmt.Fprintf(&b, "Logs: .sandbox/sandbox.log; the provider's pods under .sandbox/env/openmcp/kubelet/. Stop it all: go tool task down\n\n")
	fmt.Fprintf(&b, "Kros now:\n")
	if err := env.PrintKros(ctx, onboarding, &b); err != nil {
		return err
	}
	if warning != "" {
		fmt.Fprintf(&b, "\nWARNING: %s\n", warning)
	}
	return os.WriteFile(filepath.Join(dir, summaryFile), []byte(b.String()), 0o644)
}
