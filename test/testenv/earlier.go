package testenv

import (
	"context"
	"fmt"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	fluxmeta "github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	commonapi "github.com/openmcp-project/openmcp-operator/api/common"
	openmcpconst "github.com/openmcp-project/openmcp-operator/api/constants"
	"github.com/openmcp-project/openmcp-operator/lib/clusteraccess"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The shapes that the earlier provider, openmcp-project/service-provider-kro v1.3.0,
// leaves per Kro, as read from its public source. Its module is not served by the
// module proxy, so tests build these objects themselves; nothing here runs its code.
const (
	// EarlierHelmReleaseName and EarlierOCIRepositoryName are the names of its Flux
	// objects in the tenant namespace.
	EarlierHelmReleaseName   = "kro-helm-release"
	EarlierOCIRepositoryName = "kro-oci-repository"
	// EarlierControllerName is the controller name it gives openmcp's cluster-access
	// library, which names its AccessRequests and labels them.
	EarlierControllerName = "kro"
	// EarlierReleaseName and EarlierNamespace: the Helm release, its target and its
	// storage namespace on the ControlPlane.
	EarlierReleaseName = "kro"
	EarlierNamespace   = "kro-system"
)

// EarlierInstallation describes the earlier provider's installation of kro for one Kro.
type EarlierInstallation struct {
	// KroName and TenantNamespace: the Kro's name and its namespace on the platform
	// cluster (StableMCPNamespace of the Kro's name and namespace).
	KroName, TenantNamespace string
	// ChartURL and ChartVersion: the chart the OCIRepository points at.
	ChartURL, ChartVersion string
	// ChartPullSecret is the source of the chart pull secret in the provider's
	// namespace; nil: none. It is copied into the tenant namespace under its own name.
	ChartPullSecret *corev1.Secret
	// ImagePullSecrets are the sources of helmValues.imagePullSecrets; they are copied
	// into kro-system on the ControlPlane under their own names, without labels.
	ImagePullSecrets []*corev1.Secret
	// Values are the HelmRelease's values.
	Values *apiextensionsv1.JSON
	// Kubeconfig is the ControlPlane's kubeconfig that openmcp wrote for its AccessRequest.
	Kubeconfig []byte
	// Interval of the Flux objects; default one minute.
	Interval time.Duration
}

// AccessRequestName is the name of its AccessRequest for the ControlPlane:
// StableRequestNameFromLocalName("kro", <Kro name>) followed by "--mcp".
func (e EarlierInstallation) AccessRequestName() string {
	return clusteraccess.StableRequestNameFromLocalName(EarlierControllerName, e.KroName) + "--mcp"
}

// AccessSecretName is the secret openmcp wrote when it granted the AccessRequest.
func (e EarlierInstallation) AccessSecretName() string {
	return e.AccessRequestName() + ".kubeconfig"
}

func (e EarlierInstallation) interval() metav1.Duration {
	if e.Interval == 0 {
		return metav1.Duration{Duration: time.Minute}
	}
	return metav1.Duration{Duration: e.Interval}
}

// OCIRepository is its chart source: no provider labels, the copied chart pull secret
// under the source's name.
func (e EarlierInstallation) OCIRepository() *sourcev1.OCIRepository {
	repo := &sourcev1.OCIRepository{
		ObjectMeta: metav1.ObjectMeta{Name: EarlierOCIRepositoryName, Namespace: e.TenantNamespace},
		Spec: sourcev1.OCIRepositorySpec{
			URL:       e.ChartURL,
			Reference: &sourcev1.OCIRepositoryRef{Tag: e.ChartVersion},
			Interval:  e.interval(),
		},
	}
	if e.ChartPullSecret != nil {
		repo.Spec.SecretRef = &fluxmeta.LocalObjectReference{Name: e.ChartPullSecret.Name}
	}
	return repo
}

// HelmRelease is its release of kro: release name kro, target and storage namespace
// kro-system, CRDs Create on install and CreateReplace on upgrade, the kubeconfig of its
// AccessRequest; no provider labels.
func (e EarlierInstallation) HelmRelease() *helmv2.HelmRelease {
	return &helmv2.HelmRelease{
		ObjectMeta: metav1.ObjectMeta{Name: EarlierHelmReleaseName, Namespace: e.TenantNamespace},
		Spec: helmv2.HelmReleaseSpec{
			ChartRef: &helmv2.CrossNamespaceSourceReference{
				Kind: sourcev1.OCIRepositoryKind,
				Name: EarlierOCIRepositoryName,
			},
			Interval:         e.interval(),
			ReleaseName:      EarlierReleaseName,
			TargetNamespace:  EarlierNamespace,
			StorageNamespace: EarlierNamespace,
			Install:          &helmv2.Install{CreateNamespace: true, CRDs: helmv2.Create},
			Upgrade:          &helmv2.Upgrade{CRDs: helmv2.CreateReplace},
			KubeConfig: &fluxmeta.KubeConfigReference{SecretRef: &fluxmeta.SecretKeyReference{
				Name: e.AccessSecretName(), Key: "kubeconfig",
			}},
			Values: e.Values,
		},
	}
}

// AccessRequest is its request for the ControlPlane, labelled as openmcp's cluster-access
// library labels it, and granted.
func (e EarlierInstallation) AccessRequest(kroNamespace string) *clustersv1alpha1.AccessRequest {
	return &clustersv1alpha1.AccessRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name:      e.AccessRequestName(),
			Namespace: e.TenantNamespace,
			Labels: map[string]string{
				openmcpconst.ManagedByLabel:           EarlierControllerName,
				openmcpconst.OnboardingNameLabel:      e.KroName,
				openmcpconst.OnboardingNamespaceLabel: kroNamespace,
			},
		},
		Spec: clustersv1alpha1.AccessRequestSpec{
			RequestRef: &commonapi.ObjectReference{Name: e.KroName, Namespace: e.TenantNamespace},
			Token:      &clustersv1alpha1.TokenConfig{RoleRefs: []commonapi.RoleRef{{Kind: "ClusterRole", Name: "cluster-admin"}}},
		},
	}
}

// AccessSecret is the kubeconfig secret of the granted AccessRequest.
func (e EarlierInstallation) AccessSecret() *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: e.AccessSecretName(), Namespace: e.TenantNamespace},
		Data:       map[string][]byte{"kubeconfig": e.Kubeconfig},
	}
}

// copyOf is a copy of a source secret as the earlier provider makes it: the source's
// name, type and data, and nothing else.
func copyOf(src *corev1.Secret, namespace string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: src.Name, Namespace: namespace},
		Type:       src.Type,
		Data:       src.Data,
	}
}

// ChartSecretCopy is its copy of the chart pull secret in the tenant namespace; nil
// without one.
func (e EarlierInstallation) ChartSecretCopy() *corev1.Secret {
	if e.ChartPullSecret == nil {
		return nil
	}
	return copyOf(e.ChartPullSecret, e.TenantNamespace)
}

// ImageSecretCopies are its copies of the image pull secrets in kro-system on the
// ControlPlane.
func (e EarlierInstallation) ImageSecretCopies() []*corev1.Secret {
	var out []*corev1.Secret
	for _, s := range e.ImagePullSecrets {
		out = append(out, copyOf(s, EarlierNamespace))
	}
	return out
}

// Create makes the earlier installation on the platform cluster and the ControlPlane,
// the AccessRequest granted, as the earlier provider and openmcp leave it. withAccess
// false leaves out the AccessRequest (a platform cluster without openmcp's CRDs).
func (e EarlierInstallation) Create(ctx context.Context, platform, controlPlane client.Client, kroNamespace string, withAccess bool) error {
	if err := client.IgnoreAlreadyExists(platform.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.TenantNamespace}})); err != nil {
		return err
	}
	objs := []client.Object{e.AccessSecret(), e.OCIRepository(), e.HelmRelease()}
	if cp := e.ChartSecretCopy(); cp != nil {
		objs = append(objs, cp)
	}
	for _, o := range objs {
		if err := platform.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	if withAccess {
		ar := e.AccessRequest(kroNamespace)
		if err := platform.Create(ctx, ar); err != nil {
			return fmt.Errorf("creating AccessRequest %s: %w", ar.Name, err)
		}
		ar.Status.Phase = clustersv1alpha1.REQUEST_GRANTED
		ar.Status.SecretRef = &commonapi.LocalObjectReference{Name: e.AccessSecretName()}
		if err := platform.Status().Update(ctx, ar); err != nil {
			return fmt.Errorf("granting AccessRequest %s: %w", ar.Name, err)
		}
	}
	if len(e.ImagePullSecrets) == 0 {
		return nil
	}
	if err := client.IgnoreAlreadyExists(controlPlane.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: EarlierNamespace}})); err != nil {
		return err
	}
	for _, s := range e.ImageSecretCopies() {
		if err := controlPlane.Create(ctx, s); err != nil {
			return fmt.Errorf("creating image pull secret copy %s: %w", s.Name, err)
		}
	}
	return nil
}
