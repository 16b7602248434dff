package placement

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
)

// kro's own identity on a ControlPlane when kro runs on a workload cluster
// (WorkloadCluster placement). kro never gets a copy of the provider's credential: it
// gets a ServiceAccount of its own on the ControlPlane, whose token the provider requests
// and writes, with a kubeconfig, into a secret in the tenant's namespace on the workload
// cluster. kro mounts that secret as a volume.
const (
	// minTokenLifetime is the shortest token lifetime API servers grant: a TokenRequest
	// for less is refused, so shorter lifetimes are raised to it.
	minTokenLifetime = 10 * time.Minute
	// minCredentialRequeue keeps a token whose rotation is due at once (clock skew, an
	// API server that shortened the lifetime) from being minted in a hot loop.
	minCredentialRequeue = time.Minute
	// KroKubeconfigName names the one cluster, user and context of kro's kubeconfig.
	KroKubeconfigName = "controlplane"
)

// KroEndpoint is how kro reaches a ControlPlane: everything of the provider's own access
// but the credential.
type KroEndpoint struct {
	Server        string
	TLSServerName string
	Insecure      bool
	CaData        []byte
}

// ControlPlaneEndpoint takes server and CA from the provider's access to a ControlPlane.
// A CA file is read here, since kro runs elsewhere and cannot read the provider's files.
// An access that trusts the system's roots (no CA, TLS verified) is refused: kro's
// kubeconfig names ca.crt, and an empty CA file would trust nothing at all.
func ControlPlaneEndpoint(cfg *rest.Config) (KroEndpoint, error) {
	if cfg == nil || cfg.Host == "" {
		return KroEndpoint{}, errors.New("the provider's access to the ControlPlane names no server")
	}
	hostURL, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return KroEndpoint{}, fmt.Errorf("reading the ControlPlane's server from the provider's access: %w", err)
	}
	ep := KroEndpoint{Server: hostURL.String(), TLSServerName: cfg.ServerName, Insecure: cfg.Insecure, CaData: cfg.CAData}
	if len(ep.CaData) == 0 && cfg.CAFile != "" {
		if ep.CaData, err = os.ReadFile(cfg.CAFile); err != nil {
			return KroEndpoint{}, fmt.Errorf("reading the ControlPlane's CA bundle: %w", err)
		}
	}
	if ep.Insecure {
		ep.CaData = nil
	} else if len(ep.CaData) == 0 {
		return KroEndpoint{}, errors.New("the provider's access to the ControlPlane has no CA bundle, which kro's kubeconfig needs")
	}
	return ep, nil
}

// KroKubeconfig is kro's kubeconfig for a ControlPlane. It names the token and the CA by
// paths relative to itself: client-go resolves them against the kubeconfig's folder and
// re-reads the token file, so a rotated token in the mounted secret reaches kro without a
// restart. With insecure there is no CA (client-go refuses both).
func KroKubeconfig(server string, tlsServerName string, insecure bool) []byte {
	cluster := &clientcmdapi.Cluster{Server: server, TLSServerName: tlsServerName, InsecureSkipTLSVerify: insecure}
	if !insecure {
		cluster.CertificateAuthority = owned.KroCredentialCAKey
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[KroKubeconfigName] = cluster
	cfg.AuthInfos[KroKubeconfigName] = &clientcmdapi.AuthInfo{TokenFile: owned.KroCredentialTokenKey}
	cfg.Contexts[KroKubeconfigName] = &clientcmdapi.Context{Cluster: KroKubeconfigName, AuthInfo: KroKubeconfigName}
	cfg.CurrentContext = KroKubeconfigName
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		// Encoding a config of plain strings cannot fail; a failure is a bug in client-go.
		panic(fmt.Sprintf("encoding kro's kubeconfig: %v", err))
	}
	return data
}

// NeedsRotation tells whether kro's credential secret must be written anew: when it is
// missing or lacks a key, when its kubeconfig or CA differ from what would be written now
// (the ControlPlane moved or changed its CA), or once two thirds of its token's lifetime
// have passed, which leaves kro a third of it to pick up the next token. Otherwise it
// returns how long until that point, for the reconciler to come back then.
func NeedsRotation(secret *corev1.Secret, kubeconfig, caData []byte, now time.Time) (bool, time.Duration) {
	if secret == nil || !secret.DeletionTimestamp.IsZero() {
		return true, 0
	}
	for _, k := range []string{owned.KubeconfigKey, owned.KroCredentialTokenKey, owned.KroCredentialCAKey} {
		if _, ok := secret.Data[k]; !ok {
			return true, 0
		}
	}
	if len(secret.Data[owned.KroCredentialTokenKey]) == 0 || !bytes.Equal(secret.Data[owned.KubeconfigKey], kubeconfig) ||
		!bytes.Equal(secret.Data[owned.KroCredentialCAKey], caData) {
		return true, 0
	}
	issued, expires, ok := tokenTimes(secret)
	if !ok {
		return true, 0
	}
	due := rotationDue(issued, expires)
	if !now.Before(due) {
		return true, 0
	}
	return false, due.Sub(now)
}

// tokenTimes reads when the secret's token was issued and when it expires; false when
// either is missing or unreadable, or the token expires before it was issued.
func tokenTimes(secret *corev1.Secret) (issued, expires time.Time, ok bool) {
	issued, err := time.Parse(time.RFC3339, secret.Annotations[v1alpha1.AnnotationTokenIssued])
	if err != nil {
		return time.Time{}, time.Time{}, false
	}
	expires, err = time.Parse(time.RFC3339, secret.Annotations[v1alpha1.AnnotationTokenExpires])
	if err != nil || !expires.After(issued) {
		return time.Time{}, time.Time{}, false
	}
	return issued, expires, true
}

// rotationDue is when a token is replaced: after two thirds of its lifetime.
func rotationDue(issued, expires time.Time) time.Time {
	return issued.Add(expires.Sub(issued) / 3 * 2)
}

// MintKroToken makes sure kro's ServiceAccount (and its namespace) exist on the
// ControlPlane and requests a token for it. The ControlPlane's answer is the truth on
// expiry: API servers raise short lifetimes and may cap long ones.
func MintKroToken(ctx context.Context, cp client.Client, kro *v1alpha1.Kro, provider string, sa types.NamespacedName, lifetime time.Duration) (token []byte, expires time.Time, err error) {
	if err := applyKroServiceAccount(ctx, cp, kro, provider, sa); err != nil {
		return nil, time.Time{}, err
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(max(lifetime, minTokenLifetime) / time.Second)),
	}}
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sa.Namespace, Name: sa.Name}}
	if err := cp.SubResource("token").Create(ctx, account, req); err != nil {
		return nil, time.Time{}, fmt.Errorf("requesting a token for ServiceAccount %s on the ControlPlane: %w", sa, err)
	}
	if req.Status.Token == "" || req.Status.ExpirationTimestamp.IsZero() {
		return nil, time.Time{}, fmt.Errorf("the ControlPlane answered the TokenRequest for ServiceAccount %s without a token or its expiry", sa)
	}
	return []byte(req.Status.Token), req.Status.ExpirationTimestamp.Time, nil
}

// applyKroServiceAccount writes kro's ServiceAccount on the ControlPlane with server-side
// apply, labelled as the provider's for the Kro. Its namespace, kro-system, is made
// unlabelled when missing, as Flux makes it for kro on the ControlPlane: it outlives the
// Kro with kro's lease in it.
func applyKroServiceAccount(ctx context.Context, cp client.Client, kro *v1alpha1.Kro, provider string, sa types.NamespacedName) error {
	if err := owned.EnsureNamespace(ctx, cp, sa.Namespace, nil); err != nil {
		return fmt.Errorf("on the ControlPlane: %w", err)
	}
	account := &corev1.ServiceAccount{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Namespace: sa.Namespace, Name: sa.Name,
			Labels: owned.Labels(kro, provider, v1alpha1.RoleKroCredential), Annotations: owned.Annotations(kro)},
	}
	if err := owned.Apply(ctx, cp, account); err != nil {
		return fmt.Errorf("applying ServiceAccount %s on the ControlPlane: %w", sa, err)
	}
	return nil
}

// EnsureKroCredential keeps kro's credential secret on the workload cluster current: it
// mints a new token and writes the secret when needsRotation says so, and otherwise
// writes nothing at all. It returns when to come back and whether it wrote a new token.
// workload should read uncached (or its cache hold the secret), since a stale read mints
// a token for nothing. No error it returns holds the token.
func EnsureKroCredential(ctx context.Context, cp client.Client, cpConfig *rest.Config, workload client.Client, kro *v1alpha1.Kro, provider, workloadNamespace string, lifetime time.Duration, now time.Time) (requeueAfter time.Duration, rotated bool, err error) {
	ep, err := ControlPlaneEndpoint(cpConfig)
	if err != nil {
		return 0, false, err
	}
	kubeconfig := KroKubeconfig(ep.Server, ep.TLSServerName, ep.Insecure)
	current, err := currentKroCredential(ctx, workload, kro, provider, workloadNamespace)
	if err != nil {
		return 0, false, err
	}
	if rotate, wait := NeedsRotation(current, kubeconfig, ep.CaData, now); !rotate {
		return wait, false, nil
	}
	if err := owned.EnsureNamespace(ctx, workload, workloadNamespace, owned.Labels(kro, provider, "")); err != nil {
		return 0, false, fmt.Errorf("on the workload cluster: %w", err)
	}
	token, expires, err := MintKroToken(ctx, cp, kro, provider, owned.KroServiceAccount, lifetime)
	if err != nil {
		return 0, false, err
	}
	// The annotations keep seconds only; the requeue is computed from what they say.
	issued, expires := now.UTC().Truncate(time.Second), expires.UTC().Truncate(time.Second)
	secret := NewKroCredentialSecret(kro, provider, workloadNamespace, kubeconfig, ep.CaData, token, issued, expires)
	if err := owned.Apply(ctx, workload, secret); err != nil {
		return 0, false, RedactToken(fmt.Errorf("writing secret %s/%s on the workload cluster: %w", workloadNamespace, owned.KroCredentialSecretName, err), token)
	}
	return max(rotationDue(issued, expires).Sub(now), minCredentialRequeue), true, nil
}

// currentKroCredential reads kro's credential secret (nil when there is none). A secret
// of that name the provider did not make for this Kro is an error: it is not overwritten.
func currentKroCredential(ctx context.Context, workload client.Reader, kro *v1alpha1.Kro, provider, namespace string) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	err := workload.Get(ctx, client.ObjectKey{Namespace: namespace, Name: owned.KroCredentialSecretName}, secret)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s/%s on the workload cluster: %w", namespace, owned.KroCredentialSecretName, err)
	}
	want := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Labels: owned.Labels(kro, provider, v1alpha1.RoleKroCredential)}}
	if !owned.As(secret, want) {
		return nil, &credentialConflictError{msg: owned.ConflictMessage(kro, "secret", "the workload cluster", secret,
			"kro's credential for the ControlPlane goes under that name; delete that secret or move it elsewhere, and the provider writes kro's credential there")}
	}
	return secret, nil
}

// credentialConflictError: a secret of the credential's name on the workload cluster is
// someone else's. Its message names the secret and what to do.
type credentialConflictError struct{ msg string }

func (e *credentialConflictError) Error() string { return e.msg }

// reportCredentialConflict reports a credentialConflictError as an ownership conflict of
// WorkloadClusterReady (a Warning event on the transition) and tells whether err is one.
func reportCredentialConflict(s *step.Scope, err error) bool {
	var conflict *credentialConflictError
	if !errors.As(err, &conflict) {
		return false
	}
	s.Obs.OwnershipConflict(v1alpha1.ConditionKroCredentialReady, conflict.msg)
	return true
}

// liveOnMiss reads through its client and, for an object that is not there, asks live:
// the workload cluster's cache holds only the provider's labelled secrets, so a secret
// of the credential's name that someone else made is seen, not overwritten.
type liveOnMiss struct {
	client.Client
	live client.Reader
}

func (c liveOnMiss) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := c.Client.Get(ctx, key, obj, opts...)
	if apierrors.IsNotFound(err) {
		return c.live.Get(ctx, key, obj, opts...)
	}
	return err
}

// NewKroCredentialSecret is kro's credential secret with exactly the fields the provider
// owns. The kubeconfig refers to the other two keys by relative paths (kroKubeconfig).
func NewKroCredentialSecret(kro *v1alpha1.Kro, provider, namespace string, kubeconfig, caData, token []byte, issued, expires time.Time) *corev1.Secret {
	annotations := owned.Annotations(kro)
	annotations[v1alpha1.AnnotationTokenIssued] = issued.UTC().Format(time.RFC3339)
	annotations[v1alpha1.AnnotationTokenExpires] = expires.UTC().Format(time.RFC3339)
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        owned.KroCredentialSecretName,
			Namespace:   namespace,
			Labels:      owned.Labels(kro, provider, v1alpha1.RoleKroCredential),
			Annotations: annotations,
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{owned.KubeconfigKey: kubeconfig, owned.KroCredentialTokenKey: token, owned.KroCredentialCAKey: caData},
	}
}

// RedactToken keeps a token out of an error, which may end up in logs, events and status:
// an API server or a proxy that echoes a request body puts it there, raw or base64
// encoded. Such an error is replaced by its message with the token cut out, dropping its
// chain, since any error in it could print the token again.
func RedactToken(err error, token []byte) error {
	if err == nil || len(token) == 0 {
		return err
	}
	msg := err.Error()
	redacted := msg
	for _, form := range []string{string(token), base64.StdEncoding.EncodeToString(token)} {
		redacted = strings.ReplaceAll(redacted, form, "[redacted]")
	}
	if redacted == msg {
		return err
	}
	return errors.New(redacted)
}
