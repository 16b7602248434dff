package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/openmcp-project/service-provider-kro/clusters"
)

// Commands that write what a person would otherwise write by hand for a standalone
// installation (docs/operations.md, "Installing without openmcp").

// defaultTokenLifetime is how long the token onboarding-kubeconfig writes is valid
// unless --token-lifetime says otherwise. A week: short enough that a kubeconfig that got
// out is of use for days, not a year; long enough that a renewal once a day (a CronJob)
// may fail for days before the provider loses the onboarding cluster. The running
// provider reads a renewed kubeconfig without a restart, so renewing often costs nothing.
const defaultTokenLifetime = 7 * 24 * time.Hour

// minTokenLifetime is the shortest lifetime a TokenRequest accepts.
const minTokenLifetime = 10 * time.Minute

// kubeconfigOptions are the flags of onboarding-kubeconfig.
type kubeconfigOptions struct {
	kubeconfig, namespace, serviceAccount, server, out string
	lifetime                                           time.Duration
}

func (o *kubeconfigOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "onboarding-kubeconfig", "", "an administrator's kubeconfig of the onboarding cluster, to ask for the token with (default: the ambient kubeconfig)")
	fs.StringVar(&o.namespace, "namespace", "service-provider-kro-system", "namespace of the provider's ServiceAccount on the onboarding cluster (config/onboarding makes it)")
	fs.StringVar(&o.serviceAccount, "service-account", "service-provider-kro", "the provider's ServiceAccount on the onboarding cluster")
	fs.DurationVar(&o.lifetime, "token-lifetime", defaultTokenLifetime, "how long the token is valid, at least 10m; the API server may cap it, and the command says so. Write a new kubeconfig before it expires: the running provider reads its --onboarding-kubeconfig file again and uses the new token without a restart")
	fs.StringVar(&o.server, "server", "", "the onboarding cluster's address as the provider reaches it (default: the address in --onboarding-kubeconfig)")
	fs.StringVar(&o.out, "out", "", "file to write the kubeconfig to (default: standard output). It is written anew with mode 0600 and renamed into place, so a reader sees the old or the new kubeconfig, never a part; a symbolic link at that path is replaced, not followed")
}

// writeOnboardingKubeconfig asks the onboarding cluster for a token of the provider's
// ServiceAccount, bound to a Secret made for it, and writes a kubeconfig with it, the
// cluster's address and its CA: the provider's --onboarding-kubeconfig, or the secret
// config/platform mounts. Deleting the Secret revokes the token.
func writeOnboardingKubeconfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("onboarding-kubeconfig", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &kubeconfigOptions{}
	o.bind(fs)
	if err := parseFlags(fs, "onboarding-kubeconfig", args); err != nil {
		return err
	}
	if o.lifetime < minTokenLifetime {
		return fmt.Errorf("service-provider-kro onboarding-kubeconfig: --token-lifetime=%s: want at least %s, the shortest token the API server issues", o.lifetime, minTokenLifetime)
	}
	cfg, err := clusters.RESTConfig(clusters.Onboarding, o.kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	issuer := tokenIssuer{cs: cs, namespace: o.namespace, serviceAccount: o.serviceAccount, stderr: stderr}
	token, binding, err := issuer.issue(ctx, o.lifetime)
	if err != nil {
		return fmt.Errorf("asking the onboarding cluster (%s) for a token of ServiceAccount %s/%s: %w (apply config/onboarding first, with an administrator's kubeconfig)",
			cfg.Host, o.namespace, o.serviceAccount, err)
	}
	if err := o.write(stdout, stderr, cfg, token); err != nil {
		// Nobody holds the token: it is revoked at once.
		issuer.revoke(ctx, binding)
		return err
	}
	issuer.dropExpired(ctx)
	return nil
}

// write writes the kubeconfig for the token to --out, or to stdout.
func (o *kubeconfigOptions) write(stdout, stderr io.Writer, cfg *rest.Config, token string) error {
	data, err := o.kubeconfigWith(cfg, token)
	if err != nil {
		return err
	}
	if o.out == "" {
		_, err = stdout.Write(data)
		return err
	}
	return writeFilePrivate(o.out, data, stderr)
}

// kubeconfigWith is the kubeconfig for the token: the cluster's address (or --server)
// and its CA inline, so that it works wherever it is mounted.
func (o *kubeconfigOptions) kubeconfigWith(cfg *rest.Config, token string) ([]byte, error) {
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("reading the onboarding cluster's CA: %w", err)
		}
	}
	server := cfg.Host
	if o.server != "" {
		server = o.server
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["onboarding"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca, InsecureSkipTLSVerify: cfg.Insecure}
	kc.AuthInfos[o.serviceAccount] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["onboarding"] = &clientcmdapi.Context{Cluster: "onboarding", AuthInfo: o.serviceAccount}
	kc.CurrentContext = "onboarding"
	return clientcmd.Write(*kc)
}

// printTenantNamespace prints the namespace on the platform cluster that belongs to a
// ControlPlane, computed as openmcp computes it: where its kubeconfig secret goes, and
// the provider's Flux objects for its Kro.
func printTenantNamespace(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tenant-namespace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: service-provider-kro tenant-namespace <namespace>/<name>\n\nprints the platform cluster's namespace of the ControlPlane <name> in <namespace> on the onboarding cluster (the Kro's namespace and name)")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("service-provider-kro tenant-namespace takes one argument, <namespace>/<name>")
	}
	ns, name, ok := strings.Cut(fs.Arg(0), "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("service-provider-kro tenant-namespace: %q is not <namespace>/<name>", fs.Arg(0))
	}
	tenant, err := clusters.TenantNamespace(types.NamespacedName{Namespace: ns, Name: name})
	if err != nil {
		return fmt.Errorf("service-provider-kro tenant-namespace: %w", err)
	}
	_, err = fmt.Fprintln(stdout, tenant)
	return err
}
