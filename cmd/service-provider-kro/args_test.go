package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	providerv1alpha1 "github.com/openmcp-project/openmcp-operator/api/provider/v1alpha1"
	"go.uber.org/zap/zapcore"
	"k8s.io/utils/ptr"

	"github.com/openmcp-project/service-provider-kro/controllers/reach"
)

// openmcpInitArgs and openmcpRunArgs build the container args exactly as
// openmcp-operator v1.3.0 does for a ServiceProvider (internal/controllers/provider/
// install/job.go and deployment.go): the command (default init / run), then
// --environment, --verbosity and --provider-name, then for run --leader-elect=true with
// more than one replica and the metrics flags unless metrics are disabled. The metrics
// defaults come from openmcp's own API package.
func openmcpInitArgs(spec providerv1alpha1.DeploymentSpec, env, name string) []string {
	cmd := slices.Clone(spec.InitCommand)
	if len(cmd) == 0 {
		cmd = []string{"init"}
	}
	return append(cmd, "--environment="+env, "--verbosity="+spec.Verbosity, "--provider-name="+name)
}

func openmcpRunArgs(spec providerv1alpha1.DeploymentSpec, env, name string) []string {
	cmd := slices.Clone(spec.RunCommand)
	if len(cmd) == 0 {
		cmd = []string{"run"}
	}
	cmd = append(cmd, "--environment="+env, "--verbosity="+spec.Verbosity, "--provider-name="+name)
	if spec.RunReplicas > 1 {
		cmd = append(cmd, "--leader-elect=true")
	}
	if spec.Metrics.IsEnabled() {
		cmd = append(cmd, fmt.Sprintf("--metrics-bind-address=:%d", spec.Metrics.GetPort()), "--metrics-secure=false")
	}
	return cmd
}

// TestOpenMCPArguments parses every argument list openmcp-operator v1.3.0 gives the init
// Job and the run Deployment, for every combination of replicas, metrics and verbosity,
// and checks what each flag turned into.
func TestOpenMCPArguments(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "openmcp-system")
	metrics := map[string]*providerv1alpha1.MetricsConfiguration{
		"metrics by default":  nil,
		"metrics on 9090":     {Port: ptr.To[int32](9090)},
		"metrics disabled":    {Disabled: true},
		"metrics, no port":    {},
		"metrics off on 9090": {Disabled: true, Port: ptr.To[int32](9090)},
	}
	levels := map[string]zapcore.Level{"DEBUG": zapcore.DebugLevel, "INFO": zapcore.InfoLevel, "ERROR": zapcore.ErrorLevel, "": zapcore.InfoLevel}
	for _, replicas := range []int32{0, 1, 2, 3} {
		for mName, m := range metrics {
			for verbosity, level := range levels {
				spec := providerv1alpha1.DeploymentSpec{RunReplicas: replicas, Metrics: m, Verbosity: verbosity}
				t.Run(fmt.Sprintf("replicas %d, %s, verbosity %q", replicas, mName, verbosity), func(t *testing.T) {
					g := NewWithT(t)
					var stderr bytes.Buffer

					initArgs := openmcpInitArgs(spec, "prod-eu", "kro")
					g.Expect(initArgs[0]).To(Equal("init"))
					io, err := parseInit(initArgs[1:], &stderr)
					g.Expect(err).NotTo(HaveOccurred(), "%v: %s", initArgs, stderr.String())
					g.Expect(io.underOpenMCP()).To(BeTrue())
					g.Expect(io.providerName).To(Equal("kro"))
					g.Expect(io.environment).To(Equal("prod-eu"))

					runArgs := openmcpRunArgs(spec, "prod-eu", "kro")
					g.Expect(runArgs[0]).To(Equal("run"))
					o, err := parseRun(runArgs[1:], &stderr)
					g.Expect(err).NotTo(HaveOccurred(), "%v: %s", runArgs, stderr.String())
					g.Expect(o.underOpenMCP()).To(BeTrue(), "the onboarding cluster is requested from openmcp")
					g.Expect(o.controlPlaneAccess()).To(Equal(reach.AccessOpenMCP))
					g.Expect(o.podNamespace).To(Equal("openmcp-system"))
					g.Expect(o.leaderElectionNS).To(Equal("openmcp-system"))
					g.Expect(o.leaderElect).To(Equal(replicas > 1))
					g.Expect(o.identity()).To(Equal("service-provider-kro.prod-eu"))
					if m.IsEnabled() {
						g.Expect(o.metricsSecure).To(BeFalse(), "openmcp asks for plain HTTP")
						g.Expect(o.metricsAddr).To(Equal(fmt.Sprintf(":%d", m.GetPort())))
					} else {
						g.Expect(o.metricsAddr).To(Equal("0"), "metrics disabled in the ServiceProvider: no endpoint at all")
					}
					_, err = o.logger(&stderr)
					g.Expect(err).NotTo(HaveOccurred())
					if verbosity == "" {
						g.Expect(o.zap.Level).To(BeNil(), "no --verbosity keeps the logger's default")
						return
					}
					g.Expect(o.zap.Level.Enabled(level)).To(BeTrue())
					if level < zapcore.ErrorLevel {
						g.Expect(o.zap.Level.Enabled(level-1)).To(BeFalse(), "nothing below %s is logged", level)
					}
				})
			}
		}
	}
}

func TestCustomCommandsKeepTheirFlags(t *testing.T) {
	g := NewWithT(t)
	t.Setenv("POD_NAMESPACE", "openmcp-system")
	spec := providerv1alpha1.DeploymentSpec{
		RunCommand: []string{"run", "--max-concurrent-reconciles=20", "--controlplane-access=standalone"},
		Verbosity:  "INFO", RunReplicas: 2,
	}
	args := openmcpRunArgs(spec, "dev", "kro-test")
	o, err := parseRun(args[1:], &bytes.Buffer{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.concurrency).To(Equal(20))
	g.Expect(o.controlPlaneAccess()).To(Equal(reach.AccessStandalone), "an explicit choice wins over openmcp's default")
	g.Expect(o.providerName).To(Equal("kro-test"))
	g.Expect(o.leaderElect).To(BeTrue())
}

// TestShardingUnderOpenMCP parses what openmcp-operator passes to a ServiceProvider whose
// runCommand asks for --sharding: with runReplicas > 1 it adds --leader-elect=true, which
// sharding overrides, so that every replica carries its share. The pod's name, which
// openmcp puts into $POD_NAME, names the replica.
func TestShardingUnderOpenMCP(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "openmcp-system")
	t.Setenv("POD_NAME", "sp-kro-5d8f7c9b6-x2k4q")
	for _, replicas := range []int32{1, 3} {
		t.Run(fmt.Sprintf("replicas %d", replicas), func(t *testing.T) {
			g := NewWithT(t)
			spec := providerv1alpha1.DeploymentSpec{RunCommand: []string{"run", "--sharding"}, RunReplicas: replicas}
			args := openmcpRunArgs(spec, "prod-eu", "kro")
			if replicas > 1 {
				g.Expect(args).To(ContainElement("--leader-elect=true"), "openmcp asks for leader election")
			}
			o, err := parseRun(args[1:], &bytes.Buffer{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(o.sharding).To(BeTrue())
			g.Expect(o.leaderElect).To(BeFalse(), "sharded replicas do not elect a leader")
			g.Expect(o.shardID).To(Equal("sp-kro-5d8f7c9b6-x2k4q"))
			g.Expect(o.shardLeaseName()).To(Equal("service-provider-kro-sp-kro-5d8f7c9b6-x2k4q"))
		})
	}
	g := NewWithT(t)
	_, err := parseRun([]string{"--provider-name=kro", "--sharding", "--shard-id=Not_A_Name"}, &bytes.Buffer{})
	g.Expect(err).To(MatchError(ContainSubstring("--shard-id")))
	_, err = parseRun([]string{"--provider-name=kro", "--sharding", "--shard-lease-duration=1s"}, &bytes.Buffer{})
	g.Expect(err).To(MatchError(ContainSubstring("--shard-lease-duration")))
}

func TestStandaloneIsNotOpenMCP(t *testing.T) {
	g := NewWithT(t)
	for _, args := range [][]string{
		{"--pod-namespace=p"},
		{"--pod-namespace=p", "--environment=dev", "--onboarding-kubeconfig=/some/kubeconfig"},
	} {
		o, err := parseRun(args, &bytes.Buffer{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(o.underOpenMCP()).To(BeFalse(), "%v", args)
		g.Expect(o.controlPlaneAccess()).To(Equal(reach.AccessStandalone), "%v", args)
	}
	o, err := parseRun([]string{"--pod-namespace=p"}, &bytes.Buffer{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.identity()).To(Equal("service-provider-kro"))
	g.Expect(o.runIdentity()).To(Equal("service-provider-kro"))
}

// TestReplicasHaveIdentitiesOfTheirOwn: under --sharding each replica writes and emits
// events under its shard id, within the one environment it serves.
func TestReplicasHaveIdentitiesOfTheirOwn(t *testing.T) {
	g := NewWithT(t)
	o, err := parseRun([]string{"--pod-namespace=p", "--environment=prod", "--onboarding-kubeconfig=/k", "--sharding", "--shard-id=replica-1"}, &bytes.Buffer{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.identity()).To(Equal("service-provider-kro.prod"))
	g.Expect(o.runIdentity()).To(Equal("service-provider-kro.prod.replica-1"))
}

func TestBadArgumentsAreRefusedClearly(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "openmcp-system")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--environment=x", "--frobnicate"}, "service-provider-kro run: flag provided but not defined: -frobnicate (service-provider-kro run -h lists the flags)"},
		{[]string{"init", "--environment=x", "--frobnicate=1"}, "service-provider-kro init: flag provided but not defined: -frobnicate (service-provider-kro init -h lists the flags)"},
		{[]string{"init", "--verbosity=LOUD"}, "service-provider-kro init: --verbosity=LOUD: want DEBUG, INFO or ERROR"},
		{[]string{"run", "--verbosity=trace"}, "service-provider-kro run: --verbosity=trace: want DEBUG, INFO or ERROR"},
		{[]string{"run", "--environment=x", "extra"}, `service-provider-kro run: unexpected argument "extra" (service-provider-kro run -h lists the flags)`},
		{[]string{"run", "--controlplane-access=magic"}, "--controlplane-access=magic: want standalone or openmcp"},
	} {
		g := NewWithT(t)
		var out, errOut bytes.Buffer
		g.Expect(dispatch(context.Background(), tc.args, &out, &errOut)).To(MatchError(tc.want), "%v", tc.args)
	}
}

func TestVerbosityYieldsToZapLogLevel(t *testing.T) {
	g := NewWithT(t)
	o, err := parseRun([]string{"--pod-namespace=p", "--verbosity=ERROR", "--zap-log-level=debug"}, &bytes.Buffer{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = o.logger(&bytes.Buffer{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.zap.Level.Enabled(zapcore.DebugLevel)).To(BeTrue())
}
