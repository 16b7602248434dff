package main

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/config/crd"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// startClusters starts API servers for a test; they stop when the test ends.
func startClusters(t *testing.T, opts ...testenv.ClusterOptions) []*testenv.Cluster {
	t.Helper()
	cs, err := testenv.StartClusters(context.Background(), opts...)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { testenv.StopClusters(cs...) })
	return cs
}

// providerClusterOptions are an onboarding and a platform cluster as `init` leaves them:
// this provider's CRDs on each, and on the platform Flux's CRDs (the provider creates
// OCIRepositories and HelmReleases there) and those of platformDirs.
func providerClusterOptions(t *testing.T, platformDirs ...string) (onboarding, platform testenv.ClusterOptions) {
	t.Helper()
	g := NewWithT(t)
	obCRDs, err := crd.ForCluster(clusters.Onboarding)
	g.Expect(err).NotTo(HaveOccurred())
	pfCRDs, err := crd.ForCluster(clusters.Platform)
	g.Expect(err).NotTo(HaveOccurred())
	fluxCRDs, err := testenv.FluxCRDDirs(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	return testenv.ClusterOptions{Name: "onboarding", CRDs: obCRDs},
		testenv.ClusterOptions{Name: "platform", CRDs: pfCRDs, CRDDirs: append(fluxCRDs, platformDirs...)}
}

// writeKubeconfigs writes the onboarding and the platform cluster's kubeconfigs into a
// temporary folder, for the provider's --onboarding-kubeconfig and --platform-kubeconfig.
func writeKubeconfigs(t *testing.T, onboarding, platform *testenv.Cluster) (obPath, pfPath string) {
	t.Helper()
	g := NewWithT(t)
	dir := t.TempDir()
	obPath, err := onboarding.WriteKubeconfig(dir)
	g.Expect(err).NotTo(HaveOccurred())
	pfPath, err = platform.WriteKubeconfig(dir)
	g.Expect(err).NotTo(HaveOccurred())
	return obPath, pfPath
}

// startProviderClusters starts an onboarding and a platform cluster as providerClusterOptions
// describes them and returns them with their kubeconfig files, for a provider run by
// runProvider.
func startProviderClusters(t *testing.T) (onboarding, platform *testenv.Cluster, obPath, pfPath string) {
	t.Helper()
	ob, pf := providerClusterOptions(t)
	cs := startClusters(t, ob, pf)
	obPath, pfPath = writeKubeconfigs(t, cs[0], cs[1])
	return cs[0], cs[1], obPath, pfPath
}
