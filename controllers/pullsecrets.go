package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// reconcileChartPullSecret makes sure the tenant namespace exists, checks every pull
// secret the version names (chart and images), copies the chart pull secret into the
// tenant namespace and removes copies that are no longer used.
func (r *pullSecrets) reconcileChartPullSecret(ctx context.Context, s *scope) (result, error) {
	if out, err := r.ensureTenantNamespace(ctx, s); err != nil || out == waiting {
		return out, err
	}
	images, err := versions.ImagePullSecretNames(s.version)
	if err != nil {
		s.obs.pullSecretsNotReady(v1alpha1.ReasonInvalidProviderConfig, fmt.Sprintf("ProviderConfig %q: %s", r.ProviderName, err.Error()))
		return waiting, nil
	}
	s.imageSecrets = images
	s.sources = map[string]*corev1.Secret{}
	var problems []string
	reason := ""
	check := func(name, use string) error {
		src, problem, err := r.sourceSecret(ctx, name, use, s.version.Version)
		if err != nil {
			return err
		}
		if problem != nil {
			problems = append(problems, problem.message)
			if reason == "" {
				reason = problem.reason
			}
			return nil
		}
		s.sources[name] = src
		return nil
	}
	if name := s.version.ChartPullSecret; name != "" {
		if err := check(name, "chart pull secret"); err != nil {
			return proceed, err
		}
	}
	for _, name := range images {
		if err := check(name, "image pull secret"); err != nil {
			return proceed, err
		}
	}
	if len(problems) > 0 {
		s.obs.pullSecretsNotReady(reason, problems...)
		return waiting, nil
	}

	if name := s.version.ChartPullSecret; name != "" {
		cp := newSecretCopy(s.kro, r.ProviderName, v1alpha1.RoleChartPullSecret, s.sources[name], s.tenantNamespace, owned.ChartSecretCopyName(r.ProviderName, name))
		ours, err := owned.CopySecret(ctx, r.Platform, r.PlatformReader, cp)
		if err != nil {
			return proceed, fmt.Errorf("copying chart pull secret %q into %s: %w", name, s.tenantNamespace, err)
		}
		if !ours {
			s.obs.ownershipConflict(v1alpha1.ConditionPullSecretsReady,
				owned.ConflictMessage(s.kro, "secret", "the platform cluster", cp, fmt.Sprintf(
					"use another chart pull secret name in ProviderConfig %q (chartPullSecret of version %s), or delete that secret if nobody needs it",
					r.ProviderName, s.version.Version)))
			return waiting, nil
		}
		s.chartSecret = cp.Name
		s.obs.managed = append(s.obs.managed, managedSecret(clusters.Platform, cp))
	}
	if err := r.removeChartSecretCopies(ctx, r.Platform, s.kro, s.tenantNamespace, s.chartSecret); err != nil {
		return proceed, err
	}
	s.obs.pullSecretsReady(pullSecretsMessage(s, false))
	return proceed, nil
}

// reconcileImagePullSecrets copies the version's image pull secrets to where kro runs
// (kro-system on the ControlPlane, or the tenant's namespace on the workload cluster) and
// removes copies that are no longer referenced.
func (r *pullSecrets) reconcileImagePullSecrets(ctx context.Context, s *scope) (result, error) {
	site := s.site
	c := site.Cluster.GetClient()
	if len(s.imageSecrets) > 0 {
		var err error
		if s.workload != nil {
			err = r.placement.ensureWorkloadNamespace(ctx, s)
		} else {
			err = owned.EnsureNamespace(ctx, c, site.Namespace, nil)
		}
		if err != nil {
			return proceed, err
		}
	}
	var conflicts []string
	for _, name := range s.imageSecrets {
		cp := newSecretCopy(s.kro, r.ProviderName, v1alpha1.RoleImagePullSecret, s.sources[name], site.Namespace, name)
		ours, err := owned.CopySecret(ctx, c, site.Cluster.GetAPIReader(), cp)
		if err != nil {
			return proceed, fmt.Errorf("copying image pull secret %q: %w", name, err)
		}
		if !ours {
			conflicts = append(conflicts, owned.ConflictMessage(s.kro, "secret", site.Where, cp, fmt.Sprintf(
				"rename the image pull secret in ProviderConfig %q (helmValues.imagePullSecrets of version %s), or delete that secret on %s if nobody needs it",
				r.ProviderName, s.version.Version, site.Where)))
			continue
		}
		s.obs.managed = append(s.obs.managed, managedSecret(site.Label, cp))
	}
	if err := r.removeImageSecretCopies(ctx, c, s.kro, site.Namespace, s.imageSecrets); err != nil {
		return proceed, err
	}
	if len(conflicts) > 0 {
		s.obs.ownershipConflict(v1alpha1.ConditionPullSecretsReady, strings.Join(conflicts, "; "))
		return waiting, nil
	}
	s.obs.pullSecretsReady(pullSecretsMessage(s, true))
	return proceed, nil
}

func pullSecretsMessage(s *scope, copiedImages bool) string {
	var parts []string
	if s.chartSecret != "" {
		parts = append(parts, fmt.Sprintf("chart pull secret %q copied to %s/%s", s.version.ChartPullSecret, s.tenantNamespace, s.chartSecret))
	}
	if len(s.imageSecrets) > 0 {
		state := "found, to be copied to where kro runs"
		if copiedImages {
			state = "copied to " + s.site.Namespace + " on " + s.site.Where
		}
		parts = append(parts, fmt.Sprintf("image pull secrets %s %s", strings.Join(s.imageSecrets, ", "), state))
	}
	if len(parts) == 0 {
		return "version " + s.version.Version + " needs no pull secrets"
	}
	return strings.Join(parts, "; ")
}

// sourceSecret reads a pull secret from the provider's namespace. A secret that is
// missing or of the wrong type is a problem for the platform team to fix, not an error.
func (r *pullSecrets) sourceSecret(ctx context.Context, name, use, version string) (*corev1.Secret, *secretProblem, error) {
	secret := &corev1.Secret{}
	err := r.Platform.Get(ctx, client.ObjectKey{Namespace: r.PodNamespace, Name: name}, secret)
	if apierrors.IsNotFound(err) {
		return nil, &secretProblem{v1alpha1.ReasonPullSecretMissing, fmt.Sprintf(
			"secret %q (%s of version %s) not found in namespace %s on the platform cluster: create it with type %s",
			name, use, version, r.PodNamespace, corev1.SecretTypeDockerConfigJson)}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading secret %s/%s: %w", r.PodNamespace, name, err)
	}
	if secret.Type != corev1.SecretTypeDockerConfigJson {
		return nil, &secretProblem{v1alpha1.ReasonPullSecretWrongType, fmt.Sprintf(
			"secret %q (%s of version %s) in namespace %s has type %q, expected %s",
			name, use, version, r.PodNamespace, secret.Type, corev1.SecretTypeDockerConfigJson)}, nil
	}
	return secret, nil, nil
}

// secretProblem is what is wrong with a source pull secret, for the condition.
type secretProblem struct {
	reason, message string
}

// removeChartSecretCopies deletes the copies of chart pull secrets in the tenant
// namespace except keep ("" removes all).
func (r *pullSecrets) removeChartSecretCopies(ctx context.Context, c client.Reader, kro *v1alpha1.Kro, namespace, keep string) error {
	list := &corev1.SecretList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), r.copyLabels(kro, v1alpha1.RoleChartPullSecret)); err != nil {
		return fmt.Errorf("listing chart pull secret copies in %s: %w", namespace, err)
	}
	return r.deleteSecrets(ctx, r.Platform, list.Items, func(name string) bool { return name == keep })
}

// removeImageSecretCopies deletes the copies of image pull secrets in namespace (where
// kro runs) except those named in keep.
func (r *pullSecrets) removeImageSecretCopies(ctx context.Context, c client.Client, kro *v1alpha1.Kro, namespace string, keep []string) error {
	list := &corev1.SecretList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), r.copyLabels(kro, v1alpha1.RoleImagePullSecret)); err != nil {
		return fmt.Errorf("listing image pull secret copies in %s: %w", namespace, err)
	}
	return r.deleteSecrets(ctx, c, list.Items, func(name string) bool { return slices.Contains(keep, name) })
}

// copyLabels select the secret copies of one role that the provider made for a Kro.
func (r *pullSecrets) copyLabels(kro *v1alpha1.Kro, role string) client.MatchingLabels {
	return client.MatchingLabels(owned.Labels(kro, r.ProviderName, role))
}

// deleteSecrets deletes the provider's copies among secrets, except those keep names.
// Only a secret that carries the provider's labels is deleted, and only the very object
// that was listed (its UID is a precondition): a secret of the same name that someone
// made since is left alone.
func (r *pullSecrets) deleteSecrets(ctx context.Context, c client.Client, secrets []corev1.Secret, keep func(string) bool) error {
	for i := range secrets {
		if keep(secrets[i].Name) || secrets[i].Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByValue || secrets[i].Labels[v1alpha1.LabelProvider] != foreign.LabelValue(r.ProviderName) {
			continue
		}
		err := c.Delete(ctx, &secrets[i], client.Preconditions{UID: &secrets[i].UID})
		if apierrors.IsConflict(err) {
			// Replaced by another secret of the same name: not ours to delete.
			continue
		}
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting secret copy %s/%s: %w", secrets[i].Namespace, secrets[i].Name, err)
		}
	}
	return nil
}

func managedSecret(cluster string, s *corev1.Secret) v1alpha1.ManagedResource {
	return v1alpha1.ManagedResource{Cluster: cluster, APIVersion: "v1", Kind: "Secret", Namespace: s.Namespace, Name: s.Name, Ready: metav1.ConditionTrue}
}

// ensureTenantNamespace creates the tenant namespace when openmcp has not (standalone use).
func (r *pullSecrets) ensureTenantNamespace(ctx context.Context, s *scope) (result, error) {
	ns := &corev1.Namespace{}
	err := r.PlatformReader.Get(ctx, client.ObjectKey{Name: s.tenantNamespace}, ns)
	switch {
	case err == nil && !ns.DeletionTimestamp.IsZero():
		s.obs.pullSecretsNotReady(v1alpha1.ReasonReconciling,
			fmt.Sprintf("waiting for the tenant namespace %s on the platform cluster to finish terminating", s.tenantNamespace))
		return waiting, nil
	case err == nil:
		return proceed, nil
	case !apierrors.IsNotFound(err):
		return proceed, fmt.Errorf("reading tenant namespace %s: %w", s.tenantNamespace, err)
	}
	if err := r.Platform.Create(ctx, newTenantNamespace(s.kro, r.ProviderName, s.tenantNamespace)); client.IgnoreAlreadyExists(err) != nil {
		return proceed, fmt.Errorf("creating tenant namespace %s: %w", s.tenantNamespace, err)
	}
	return proceed, nil
}
