package flux

import (
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// The objects below are built with exactly the fields the provider owns, TypeMeta
// included, so that server-side apply of an unchanged object writes nothing.

// newOCIRepository is the chart source of a Kro in its tenant namespace.
func newOCIRepository(kro *v1alpha1.Kro, provider, namespace string, v *v1alpha1.KroVersion, pullSecret string, interval time.Duration) *sourcev1.OCIRepository {
	repo := &sourcev1.OCIRepository{
		TypeMeta: metav1.TypeMeta{APIVersion: sourcev1.GroupVersion.String(), Kind: sourcev1.OCIRepositoryKind},
		ObjectMeta: metav1.ObjectMeta{
			Name:        owned.FluxObjectName(provider),
			Namespace:   namespace,
			Labels:      owned.Labels(kro, provider, ""),
			Annotations: owned.Annotations(kro),
		},
		Spec: sourcev1.OCIRepositorySpec{
			URL:       versions.ChartURL(v),
			Reference: &sourcev1.OCIRepositoryRef{Tag: v.ChartVersion},
			Interval:  metav1.Duration{Duration: interval},
		},
	}
	if pullSecret != "" {
		repo.Spec.SecretRef = &meta.LocalObjectReference{Name: pullSecret}
	}
	return repo
}

// NewHelmRelease installs kro from the OCIRepository onto the ControlPlane that the
// kubeconfig secret gives access to. Drift detection is on: at every reconcile of the
// HelmRelease (spec.interval, the poll interval) helm-controller compares the release's
// objects with the cluster's and puts back what someone deleted or changed, such as a
// tenant deleting or scaling down kro's Deployment (KroAvailable reports that at once).
func NewHelmRelease(kro *v1alpha1.Kro, provider, namespace string, v *v1alpha1.KroVersion, kubeconfig reach.SecretKey, interval time.Duration) *helmv2.HelmRelease {
	rollback := helmv2.RollbackRemediationStrategy
	hr := &helmv2.HelmRelease{
		TypeMeta: metav1.TypeMeta{APIVersion: helmv2.GroupVersion.String(), Kind: helmv2.HelmReleaseKind},
		ObjectMeta: metav1.ObjectMeta{
			Name:        owned.FluxObjectName(provider),
			Namespace:   namespace,
			Labels:      owned.Labels(kro, provider, ""),
			Annotations: owned.Annotations(kro),
		},
		Spec: helmv2.HelmReleaseSpec{
			ChartRef: &helmv2.CrossNamespaceSourceReference{
				APIVersion: sourcev1.GroupVersion.String(),
				Kind:       sourcev1.OCIRepositoryKind,
				Name:       owned.FluxObjectName(provider),
			},
			Interval:         metav1.Duration{Duration: interval},
			KubeConfig:       &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: kubeconfig.Name, Key: kubeconfig.Key}},
			ReleaseName:      owned.ReleaseName,
			TargetNamespace:  owned.KroNamespace,
			StorageNamespace: owned.KroNamespace,
			Install: &helmv2.Install{
				CreateNamespace: true,
				CRDs:            helmv2.CreateReplace,
				Remediation:     &helmv2.InstallRemediation{Retries: 3},
			},
			Upgrade: &helmv2.Upgrade{
				CRDs:          helmv2.CreateReplace,
				CleanupOnFail: true,
				Remediation:   &helmv2.UpgradeRemediation{Retries: 3, Strategy: &rollback},
			},
			DriftDetection: &helmv2.DriftDetection{Mode: helmv2.DriftDetectionEnabled},
		},
	}
	if v.HelmValues != nil && len(v.HelmValues.Raw) > 0 {
		hr.Spec.Values = v.HelmValues.DeepCopy()
	}
	return hr
}

// NewSecretCopy copies the type and data of a source secret under a new name.
func NewSecretCopy(kro *v1alpha1.Kro, provider, role string, src *corev1.Secret, namespace, name string) *corev1.Secret {
	annotations := owned.Annotations(kro)
	annotations[v1alpha1.AnnotationSourceSecret] = src.Name
	data := make(map[string][]byte, len(src.Data))
	for k, v := range src.Data {
		data[k] = v
	}
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   namespace,
			Labels:      owned.Labels(kro, provider, role),
			Annotations: annotations,
		},
		Type: src.Type,
		Data: data,
	}
}

// NewTenantNamespace is the tenant namespace when the provider has to create it itself.
func NewTenantNamespace(kro *v1alpha1.Kro, provider, name string) *corev1.Namespace {
	return &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: owned.Labels(kro, provider, ""), Annotations: owned.Annotations(kro)},
	}
}
