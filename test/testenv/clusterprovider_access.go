package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	commonapi "github.com/openmcp-project/openmcp-operator/api/common"
	libutils "github.com/openmcp-project/openmcp-operator/lib/utils"
)

// The cluster provider's grants: AccessRequests answered with a ServiceAccount on the
// target cluster that holds exactly the requested permissions, and a kubeconfig with a
// token for it.

func (p *ClusterProvider) reconcileAccessRequests(ctx context.Context) error {
	var list clustersv1alpha1.AccessRequestList
	if err := p.platform.List(ctx, &list, client.MatchingLabels{clustersv1alpha1.ProviderLabel: ClusterProviderName}); err != nil {
		return err
	}
	var errs []error
	for i := range list.Items {
		ar := &list.Items[i]
		key := client.ObjectKeyFromObject(ar)
		p.mu.Lock()
		rotateDone, rotate := p.rotate[key]
		delete(p.rotate, key)
		p.mu.Unlock()
		err := p.reconcileAccessRequest(ctx, ar, rotate)
		if rotate {
			rotateDone <- err
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("access request %s: %w", key, err))
		}
	}
	p.mu.Lock()
	for key, done := range p.rotate { // asked to rotate what does not exist (yet)
		if !slices.ContainsFunc(list.Items, func(ar clustersv1alpha1.AccessRequest) bool { return client.ObjectKeyFromObject(&ar) == key }) {
			delete(p.rotate, key)
			done <- fmt.Errorf("no AccessRequest %s of this cluster provider", key)
		}
	}
	p.mu.Unlock()
	return errors.Join(errs...)
}

func (p *ClusterProvider) reconcileAccessRequest(ctx context.Context, ar *clustersv1alpha1.AccessRequest, rotate bool) error {
	if !ar.DeletionTimestamp.IsZero() {
		return p.finalizeAccessRequest(ctx, ar)
	}
	if !libutils.IsClusterProviderResponsibleForAccessRequest(ar, ClusterProviderName) {
		if rotate {
			return fmt.Errorf("access request %s/%s is not this provider's to grant now (phase %q)", ar.Namespace, ar.Name, ar.Status.Phase)
		}
		return nil // openmcp's AccessRequest controller acts first
	}
	secret, granted, err := p.currentGrant(ctx, ar)
	if err != nil || (granted && !rotate) {
		return err
	}
	backing, err := p.backingOf(ctx, ar)
	if err != nil {
		return err
	}
	cfg, target := p.targetConfig(backing), p.targets[backing]
	// The finalizer comes before the first grant, and with it the cluster the grants are
	// made on: revoking them must not depend on the Cluster, which openmcp's scheduler
	// may delete first.
	finalizer := controllerutil.AddFinalizer(ar, accessFinalizer)
	if finalizer || ar.Annotations[backingAnnotation] != backing {
		metav1.SetMetaDataAnnotation(&ar.ObjectMeta, backingAnnotation, backing)
		if err := p.platform.Update(ctx, ar); err != nil {
			return err
		}
	}
	previous := secret.Annotations[serviceAccountAnnot]
	serial := 0
	if previous != "" {
		serial, _ = strconv.Atoi(secret.Annotations[serviceAccountAnnot+"-serial"])
		serial++
	}
	saName := fmt.Sprintf("%s-%d", accessBaseName(ar), serial)
	kubeconfig, token, expires, err := p.issue(ctx, target, cfg, ar, saName)
	if err != nil {
		return err
	}
	if secret, err = p.writeAccessSecret(ctx, ar, cfg, saName, serial, kubeconfig, token, expires); err != nil {
		return err
	}
	if err := p.markGranted(ctx, ar, secret.Name, "token of ServiceAccount "+AccessNamespace+"/"+saName+" on "+backing); err != nil {
		return err
	}
	verb := "granted"
	if previous != "" && previous != saName {
		verb = "rotated"
		if err := p.revoke(ctx, target, previous); err != nil {
			return fmt.Errorf("revoking the previous ServiceAccount %s: %w", previous, err)
		}
	}
	fmt.Fprintf(p.opts.Log, "clusterprovider: %s AccessRequest %s/%s on %s as %s/%s\n", verb, ar.Namespace, ar.Name, backing, AccessNamespace, saName)
	return nil
}

// backingOf returns the name of the real cluster behind the Cluster an AccessRequest refers to.
func (p *ClusterProvider) backingOf(ctx context.Context, ar *clustersv1alpha1.AccessRequest) (string, error) {
	if ar.Spec.ClusterRef == nil {
		return "", fmt.Errorf("no clusterRef")
	}
	cluster := &clustersv1alpha1.Cluster{}
	if err := p.platform.Get(ctx, client.ObjectKey{Namespace: ar.Spec.ClusterRef.Namespace, Name: ar.Spec.ClusterRef.Name}, cluster); err != nil {
		return "", err
	}
	backing := cluster.Annotations[backingAnnotation]
	if p.targetConfig(backing) == nil {
		return "", fmt.Errorf("cluster %s/%s has no backing cluster yet", cluster.Namespace, cluster.Name)
	}
	return backing, nil
}

// currentGrant returns the AccessRequest's access secret (empty if there is none) and whether
// the AccessRequest is granted with it for its current generation.
func (p *ClusterProvider) currentGrant(ctx context.Context, ar *clustersv1alpha1.AccessRequest) (*corev1.Secret, bool, error) {
	secret := &corev1.Secret{}
	err := p.platform.Get(ctx, client.ObjectKey{Namespace: ar.Namespace, Name: accessSecretName(ar)}, secret)
	if apierrors.IsNotFound(err) {
		return &corev1.Secret{}, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	granted := ar.Status.IsGranted() && ar.Status.ObservedGeneration == ar.Generation &&
		ar.Status.SecretRef != nil && ar.Status.SecretRef.Name == secret.Name
	return secret, granted, nil
}

// markGranted sets the AccessRequest's status: Granted, with its secret.
func (p *ClusterProvider) markGranted(ctx context.Context, ar *clustersv1alpha1.AccessRequest, secretName, message string) error {
	old := ar.DeepCopy()
	ar.Status.Phase = clustersv1alpha1.REQUEST_GRANTED
	ar.Status.ObservedGeneration = ar.Generation
	ar.Status.SecretRef = &commonapi.LocalObjectReference{Name: secretName}
	apimeta.SetStatusCondition(&ar.Status.Conditions, metav1.Condition{
		Type: "Granted", Status: metav1.ConditionTrue, Reason: "TokenIssued", ObservedGeneration: ar.Generation, Message: message,
	})
	return p.platform.Status().Patch(ctx, ar, client.MergeFrom(old))
}

// finalizeAccessRequest revokes a deleted AccessRequest's ServiceAccounts and deletes its
// secret, then lets it go.
func (p *ClusterProvider) finalizeAccessRequest(ctx context.Context, ar *clustersv1alpha1.AccessRequest) error {
	if !controllerutil.ContainsFinalizer(ar, accessFinalizer) {
		return nil
	}
	revoked, err := p.revokeAll(ctx, ar)
	if err != nil {
		return err
	}
	if err := client.IgnoreNotFound(p.platform.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ar.Namespace, Name: accessSecretName(ar)}})); err != nil {
		return err
	}
	old := ar.DeepCopy()
	controllerutil.RemoveFinalizer(ar, accessFinalizer)
	fmt.Fprintf(p.opts.Log, "clusterprovider: revoked AccessRequest %s/%s: %s\n", ar.Namespace, ar.Name, revoked)
	return p.platform.Patch(ctx, ar, client.MergeFrom(old))
}

// writeAccessSecret writes the access secret of a grant, owned by the AccessRequest.
func (p *ClusterProvider) writeAccessSecret(ctx context.Context, ar *clustersv1alpha1.AccessRequest, cfg *rest.Config,
	saName string, serial int, kubeconfig []byte, token string, expires time.Time) (*corev1.Secret, error) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ar.Namespace, Name: accessSecretName(ar)}}
	_, err := controllerutil.CreateOrUpdate(ctx, p.platform, secret, func() error {
		metav1.SetMetaDataAnnotation(&secret.ObjectMeta, serviceAccountAnnot, saName)
		metav1.SetMetaDataAnnotation(&secret.ObjectMeta, serviceAccountAnnot+"-serial", strconv.Itoa(serial))
		metav1.SetMetaDataLabel(&secret.ObjectMeta, accessLabel, ar.Name)
		secret.Data = map[string][]byte{
			clustersv1alpha1.SecretKeyKubeconfig:          kubeconfig,
			clustersv1alpha1.SecretKeyToken:               []byte(token),
			clustersv1alpha1.SecretKeyHost:                []byte(cfg.Host),
			clustersv1alpha1.SecretKeyCA:                  cfg.CAData,
			clustersv1alpha1.SecretKeyCreationTimestamp:   []byte(strconv.FormatInt(time.Now().Unix(), 10)),
			clustersv1alpha1.SecretKeyExpirationTimestamp: []byte(strconv.FormatInt(expires.Unix(), 10)),
		}
		return controllerutil.SetOwnerReference(ar, secret, OpenMCPScheme)
	})
	return secret, err
}

// accessBaseName is the prefix of the names of an AccessRequest's ServiceAccounts, roles
// and bindings on the target cluster.
func accessBaseName(ar *clustersv1alpha1.AccessRequest) string {
	h := sha256.Sum256([]byte(ar.Namespace + "/" + ar.Name))
	return "ar-" + hex.EncodeToString(h[:])[:10]
}

func accessSecretName(ar *clustersv1alpha1.AccessRequest) string {
	name := ar.Name + ".kubeconfig"
	if len(name) > 253 {
		name = accessBaseName(ar) + ".kubeconfig"
	}
	return name
}

// issue creates the ServiceAccount saName with the AccessRequest's permissions on the
// target cluster and returns a kubeconfig with a token for it.
func (p *ClusterProvider) issue(ctx context.Context, target client.Client, cfg *rest.Config, ar *clustersv1alpha1.AccessRequest, saName string) ([]byte, string, time.Time, error) {
	if err := target.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: AccessNamespace}}); client.IgnoreAlreadyExists(err) != nil {
		return nil, "", time.Time{}, err
	}
	labels := map[string]string{accessLabel: accessBaseName(ar), serviceAccountAnnot: saName}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: AccessNamespace, Name: saName, Labels: labels}}
	if err := target.Create(ctx, sa); client.IgnoreAlreadyExists(err) != nil {
		return nil, "", time.Time{}, err
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: saName, Namespace: AccessNamespace}}
	var objs []client.Object
	if ar.Spec.Token != nil {
		for i, perm := range ar.Spec.Token.Permissions {
			name := fmt.Sprintf("%s-p%d", saName, i)
			if perm.Namespace == "" {
				objs = append(objs,
					&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Rules: perm.Rules},
					&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Subjects: subject,
						RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}})
				continue
			}
			if !perm.DisableAutomaticNamespaceCreation {
				if err := target.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: perm.Namespace}}); client.IgnoreAlreadyExists(err) != nil {
					return nil, "", time.Time{}, err
				}
			}
			objs = append(objs,
				&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: perm.Namespace, Name: name, Labels: labels}, Rules: perm.Rules},
				&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: perm.Namespace, Name: name, Labels: labels}, Subjects: subject,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}})
		}
		for i, ref := range ar.Spec.Token.RoleRefs {
			name := fmt.Sprintf("%s-r%d", saName, i)
			roleRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: ref.Kind, Name: ref.Name}
			if ref.Kind == "ClusterRole" && ref.Namespace == "" {
				objs = append(objs, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Subjects: subject, RoleRef: roleRef})
			} else {
				objs = append(objs, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: name, Labels: labels}, Subjects: subject, RoleRef: roleRef})
			}
		}
	}
	for _, o := range objs {
		if err := target.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
			return nil, "", time.Time{}, fmt.Errorf("creating %T %s: %w", o, client.ObjectKeyFromObject(o), err)
		}
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(p.opts.TokenTTL.Seconds()))}}
	if err := target.SubResource("token").Create(ctx, sa, req); err != nil {
		return nil, "", time.Time{}, fmt.Errorf("requesting a token for %s: %w", saName, err)
	}
	kc, err := tokenKubeconfig(cfg, "access", "system:serviceaccount:"+AccessNamespace+":"+saName, req.Status.Token)
	return kc, req.Status.Token, req.Status.ExpirationTimestamp.Time, err
}

// revokeAll deletes every ServiceAccount, role and binding issued for the AccessRequest,
// on the cluster its finalizer recorded (the Cluster's backing for one granted before
// that was recorded), and says what it deleted where.
func (p *ClusterProvider) revokeAll(ctx context.Context, ar *clustersv1alpha1.AccessRequest) (string, error) {
	backing := ar.Annotations[backingAnnotation]
	if backing == "" && ar.Spec.ClusterRef != nil {
		cluster := &clustersv1alpha1.Cluster{}
		if err := p.platform.Get(ctx, client.ObjectKey{Namespace: ar.Spec.ClusterRef.Namespace, Name: ar.Spec.ClusterRef.Name}, cluster); client.IgnoreNotFound(err) != nil {
			return "", err
		}
		backing = cluster.Annotations[backingAnnotation]
	}
	target := p.targets[backing]
	if target == nil {
		return "nothing was granted", nil
	}
	deleted, err := p.revokeSelector(ctx, target, client.MatchingLabels{accessLabel: accessBaseName(ar)})
	return fmt.Sprintf("deleted %v on %s", deleted, backing), err
}

// revoke deletes one ServiceAccount and its roles and bindings; its tokens stop working.
func (p *ClusterProvider) revoke(ctx context.Context, target client.Client, saName string) error {
	_, err := p.revokeSelector(ctx, target, client.MatchingLabels{serviceAccountAnnot: saName})
	return err
}

// revokeSelector deletes the ServiceAccounts, roles and bindings sel matches and returns
// their kinds and names.
func (p *ClusterProvider) revokeSelector(ctx context.Context, target client.Client, sel client.MatchingLabels) ([]string, error) {
	var errs []error
	var deleted []string
	for _, list := range []client.ObjectList{&corev1.ServiceAccountList{}, &rbacv1.ClusterRoleBindingList{}, &rbacv1.ClusterRoleList{},
		&rbacv1.RoleBindingList{}, &rbacv1.RoleList{}} {
		if err := target.List(ctx, list, sel); err != nil {
			errs = append(errs, err)
			continue
		}
		kind := strings.TrimSuffix(fmt.Sprintf("%T", list), "List")
		_ = apimeta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(client.Object)
			if err := target.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				errs = append(errs, err)
				return nil
			}
			deleted = append(deleted, kind[strings.LastIndex(kind, ".")+1:]+" "+obj.GetName())
			return nil
		})
	}
	return deleted, errors.Join(errs...)
}

// tokenKubeconfig is a self-contained kubeconfig for cfg's server and CA with a bearer token.
func tokenKubeconfig(cfg *rest.Config, clusterName, user, token string) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[clusterName] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[clusterName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: user}
	kc.CurrentContext = clusterName
	return clientcmd.Write(*kc)
}
