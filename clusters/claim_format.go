package clusters

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

// Installation tells one installation of the provider from another. The environment
// alone does not: every standalone installation is "standalone", and two platform
// clusters can run environments of one name. The platform cluster's identity (the UID
// of its kube-system namespace, which lives as long as the cluster), the provider's
// name and its namespace there complete it: two installations in two namespaces of one
// platform cluster are two installations. The replicas of one installation share all
// four, and so share the claim.
type Installation struct {
	// Environment is --environment, or "standalone".
	Environment string
	// Provider is --provider-name.
	Provider string
	// Platform is the UID of the platform cluster's kube-system namespace.
	Platform string
	// Namespace is the provider's namespace on the platform cluster (--pod-namespace).
	// Empty where it is not known (init without --pod-namespace) or not recorded (a
	// claim of the previous format, which named no namespace).
	Namespace string
}

// claimKey prefixes the claim of an installation; a claim without it was written by a
// version that named the environment only.
const claimKey = "environment="

// The parts of a claim after the environment, in their order.
const (
	providerPart  = ",provider="
	platformPart  = ",platform="
	namespacePart = ",namespace="
)

// Claim is the installation's value of the claim annotation. An installation whose
// namespace is not known leaves it out, as the previous format did.
func (i Installation) Claim() string {
	v := claimKey + i.Environment + providerPart + i.Provider + platformPart + i.Platform
	if i.Namespace != "" {
		v += namespacePart + i.Namespace
	}
	return v
}

// earlier tells a claim written by an earlier version, which names the environment only.
func (i Installation) earlier() bool { return i.Provider == "" && i.Platform == "" }

// samePlatform says whether i and o are the same installation but for the namespace:
// the same environment and provider on the same platform cluster.
func (i Installation) samePlatform(o Installation) bool {
	return i.Environment == o.Environment && i.Provider == o.Provider && i.Platform == o.Platform
}

// String names the installation in messages.
func (i Installation) String() string {
	if i.earlier() {
		return fmt.Sprintf("environment %q (a claim by an earlier version, which names the environment only)", i.Environment)
	}
	ns := ""
	if i.Namespace != "" {
		ns = fmt.Sprintf(" in namespace %q", i.Namespace)
	}
	return fmt.Sprintf("environment %q of provider %q%s on the platform cluster whose kube-system namespace has UID %s",
		i.Environment, i.Provider, ns, i.Platform)
}

// maxClaim bounds the claim value a message repeats: anyone with kubectl can write it.
const maxClaim = 256

// ParseClaim reads the claim annotation's value: an installation's claim (with or
// without its namespace), or the bare environment an earlier version wrote.
func ParseClaim(v string) Installation {
	v = foreign.Text(v, maxClaim)
	rest, ok := strings.CutPrefix(v, claimKey)
	if !ok {
		return Installation{Environment: v}
	}
	var i Installation
	if at := strings.LastIndex(rest, platformPart); at >= 0 {
		rest, i.Platform = rest[:at], rest[at+len(platformPart):]
		// The namespace comes after the platform's UID, which never holds a comma.
		i.Platform, i.Namespace, _ = strings.Cut(i.Platform, namespacePart)
	}
	if at := strings.LastIndex(rest, providerPart); at >= 0 {
		rest, i.Provider = rest[:at], rest[at+len(providerPart):]
	}
	i.Environment = rest
	// A claim in this format that lacks a part was written by hand: not an earlier
	// version's, and "?" in messages for what it lacks.
	if i.Provider == "" {
		i.Provider = "?"
	}
	if i.Platform == "" {
		i.Platform = "?"
	}
	return i
}

// PlatformIdentity is the identity of the platform cluster: the UID of its kube-system
// namespace.
func PlatformIdentity(ctx context.Context, platform client.Reader) (string, error) {
	ns := &corev1.Namespace{}
	if err := platform.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, ns); err != nil {
		return "", fmt.Errorf("reading the platform cluster's identity (the UID of namespace %s): %w", metav1.NamespaceSystem, err)
	}
	return string(ns.UID), nil
}
