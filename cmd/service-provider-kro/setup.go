package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/openmcp-project/service-provider-kro/clusters"
)

// Commands that write what a person would otherwise write by hand for a standalone
// installation (docs/operations.md, "Installing without openmcp").

// kubeconfigOptions are the flags of onboarding-kubeconfig.
type kubeconfigOptions struct {
	kubeconfig, namespace, serviceAccount, server, out string
	duration                                           time.Duration
}

func (o *kubeconfigOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "onboarding-kubeconfig", "", "an administrator's kubeconfig of the onboarding cluster, to ask for the token with (default: the ambient kubeconfig)")
	fs.StringVar(&o.namespace, "namespace", "service-provider-kro-system", "namespace of the provider's ServiceAccount on the onboarding cluster (config/onboarding makes it)")
	fs.StringVar(&o.serviceAccount, "service-account", "service-provider-kro", "the provider's ServiceAccount on the onboarding cluster")
	fs.DurationVar(&o.duration, "duration", 8760*time.Hour, "how long the token is to be valid; the API server may cap it, and the command says so")
	fs.StringVar(&o.server, "server", "", "the onboarding cluster's address as the provider reaches it (default: the address in --onboarding-kubeconfig)")
	fs.StringVar(&o.out, "out", "", "file to write the kubeconfig to, mode 0600 (default: standard output)")
}

// writeOnboardingKubeconfig asks the onboarding cluster for a token of the provider's
// ServiceAccount and writes a kubeconfig with it, the cluster's address and its CA: the
// provider's --onboarding-kubeconfig, or the secret config/platform mounts.
func writeOnboardingKubeconfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("onboarding-kubeconfig", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &kubeconfigOptions{}
	o.bind(fs)
	if err := parseFlags(fs, "onboarding-kubeconfig", args); err != nil {
		return err
	}
	cfg, err := clusters.RESTConfig(clusters.Onboarding, o.kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	tr, err := cs.CoreV1().ServiceAccounts(o.namespace).CreateToken(ctx, o.serviceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(o.duration.Seconds()))},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("asking the onboarding cluster (%s) for a token of ServiceAccount %s/%s: %w (apply config/onboarding first, with an administrator's kubeconfig)",
			cfg.Host, o.namespace, o.serviceAccount, err)
	}
	if left := time.Until(tr.Status.ExpirationTimestamp.Time); left < o.duration-time.Minute {
		fmt.Fprintf(stderr, "the API server caps the token: it expires at %s (in %s); write a new kubeconfig before then, or use a Secret of type kubernetes.io/service-account-token\n",
			tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339), left.Round(time.Minute))
	}
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return fmt.Errorf("reading the onboarding cluster's CA: %w", err)
		}
	}
	server := cfg.Host
	if o.server != "" {
		server = o.server
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["onboarding"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca, InsecureSkipTLSVerify: cfg.Insecure}
	kc.AuthInfos[o.serviceAccount] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["onboarding"] = &clientcmdapi.Context{Cluster: "onboarding", AuthInfo: o.serviceAccount}
	kc.CurrentContext = "onboarding"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	if o.out == "" {
		_, err = stdout.Write(data)
		return err
	}
	return os.WriteFile(o.out, data, 0o600)
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
