package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/config/crd"
)

// preflight checks an existing installation of this API (the earlier provider's, or an
// older one of this provider) against this release before the switch, and says what to
// fix: what would stall the provider is a finding to fix. It reads only. Its exit code
// tells a script the outcome: 0 nothing to fix, 1 something to fix, 2 it could not
// check (a cluster unreachable, a read refused, a flag wrong).

// The exit codes of preflight besides 0.
const (
	preflightToFix      = 1
	preflightCannotTell = 2
)

// olderGroup is the API group of an older generation of the provider's API, which this
// provider does not serve.
const olderGroup = "kro.services.openmcp.cloud"

type preflightOptions struct {
	onboardingKubeconfig, platformKubeconfig, providerName, podNamespace, environment string
}

func (o *preflightOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.onboardingKubeconfig, "onboarding-kubeconfig", "", "kubeconfig of the onboarding cluster, where Kro objects live (default: the ambient kubeconfig)")
	fs.StringVar(&o.platformKubeconfig, "platform-kubeconfig", "", "kubeconfig of the platform cluster, where the ProviderConfig and the tenant namespaces live (default: the ambient kubeconfig)")
	fs.StringVar(&o.providerName, "provider-name", "kro", "name of the provider: its ProviderConfig carries the same name")
	fs.StringVar(&o.podNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "the provider's namespace on the platform cluster, where the pull secrets the ProviderConfig names must be (they are checked when it is given), where the earlier provider is looked for (without it: in every namespace), and which the claim of the onboarding cluster names (default: $POD_NAMESPACE)")
	fs.StringVar(&o.environment, "environment", "", "the environment the provider runs in (--environment of init and run), which the claim of the onboarding cluster names (default: \""+standaloneEnvironment+"\")")
}

// finding is one line of the report.
type finding struct {
	fix  bool // the switch would stall on it
	note bool // worth knowing, nothing to fix
	text string
}

// preflightRun is what the checks share.
type preflightRun struct {
	opts                 preflightOptions
	onboarding, platform client.Client
	// pc is the ProviderConfig as this release reads it, and offered its versions; nil
	// when it could not be read.
	pc       *v1alpha1.ProviderConfig
	offered  []string
	findings []finding
}

func (p *preflightRun) ok(format string, args ...any) {
	p.findings = append(p.findings, finding{text: fmt.Sprintf(format, args...)})
}

func (p *preflightRun) toFix(format string, args ...any) {
	p.findings = append(p.findings, finding{fix: true, text: fmt.Sprintf(format, args...)})
}

func (p *preflightRun) noteThat(format string, args ...any) {
	p.findings = append(p.findings, finding{note: true, text: fmt.Sprintf(format, args...)})
}

// runPreflight runs the checks in order and prints the report. Its error carries the
// exit code (*exitError), but for -h.
func runPreflight(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("preflight", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := preflightOptions{}
	o.bind(fs)
	if err := parseFlags(fs, "preflight", args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &exitError{code: preflightCannotTell, err: err}
	}
	err := preflight(ctx, o, stdout)
	var toFix *exitError
	if err != nil && !errors.As(err, &toFix) {
		return &exitError{code: preflightCannotTell, err: fmt.Errorf("%w; nothing was checked to the end: fix this and run preflight again", err)}
	}
	return err
}

// preflight reads both clusters and reports; it fails with an *exitError when there is
// something to fix, and with any other error when it could not check.
func preflight(ctx context.Context, o preflightOptions, stdout io.Writer) error {
	p := &preflightRun{opts: o}
	var obCfg, pfCfg *rest.Config
	var err error
	if p.onboarding, obCfg, err = preflightClient(clusters.Onboarding, o.onboardingKubeconfig); err != nil {
		return err
	}
	if p.platform, pfCfg, err = preflightClient(clusters.Platform, o.platformKubeconfig); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "preflight of provider %q: onboarding cluster %s, platform cluster %s\n\n", o.providerName, obCfg.Host, pfCfg.Host)
	for _, check := range []func(context.Context) error{
		p.checkClaim, p.checkEarlierProvider, p.checkOlderGroup, p.checkProviderConfig, p.checkKros, p.checkPullSecrets, p.checkEarlierInstallations,
	} {
		if err := check(ctx); err != nil {
			return err
		}
	}
	return p.report(stdout)
}

func preflightClient(kind, kubeconfig string) (client.Client, *rest.Config, error) {
	cfg, err := clusters.RESTConfig(kind, kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("preflight: the %s cluster: %w", kind, err)
	}
	if err := reachable(cfg); err != nil {
		return nil, nil, fmt.Errorf("preflight: the %s cluster: %w", kind, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: clusters.Scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("preflight: the %s cluster: %w", kind, err)
	}
	return c, cfg, nil
}

// report prints the findings, those to fix first, and fails when there is one.
func (p *preflightRun) report(w io.Writer) error {
	fixes := 0
	for _, pass := range []func(finding) bool{
		func(f finding) bool { return f.fix },
		func(f finding) bool { return f.note },
		func(f finding) bool { return !f.fix && !f.note },
	} {
		for _, f := range p.findings {
			if !pass(f) {
				continue
			}
			mark := "ok  "
			switch {
			case f.fix:
				mark = "FIX "
				fixes++
			case f.note:
				mark = "note"
			}
			fmt.Fprintf(w, "%s  %s\n", mark, f.text)
		}
	}
	if fixes > 0 {
		fmt.Fprintf(w, "\n%d to fix before the switch: the provider would stall on them.\n", fixes)
		return &exitError{code: preflightToFix, err: fmt.Errorf("preflight: %d to fix before the switch", fixes)}
	}
	fmt.Fprintln(w, "\nnothing to fix: the switch can go ahead (docs/migration.md, \"Taking over from the earlier provider\").")
	return nil
}

// schemaOf is this release's schema of the CRD named name.
func schemaOf(name string) (*crdSchema, error) {
	all, err := crd.All()
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(all, func(c *apiextensionsv1.CustomResourceDefinition) bool { return c.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("this release has no CRD %s", name)
	}
	return newCRDSchema(all[i])
}

// fieldErrors joins what a schema refused.
func fieldErrors(errs field.ErrorList) string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return strings.Join(out, "; ")
}
