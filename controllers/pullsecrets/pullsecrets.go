// Package pullsecrets copies the pull secrets a version names to where they are used: the
// chart's into the tenant's namespace on the platform cluster for source-controller, the
// images' to where kro runs. Copier holds the steps.
package pullsecrets

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/clusters"
	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// Copier copies the chart's and the images' pull secrets to where they are used.
type Copier struct{ step.Clients }

// ReconcileChartPullSecret makes sure the tenant namespace exists, checks every pull
// secret the version names (chart and images), copies the chart pull secret into the
// tenant namespace and removes copies that are no longer used.
func (r *Copier) ReconcileChartPullSecret(ctx context.Context, s *step.Scope) (step.Result, error) {
	if out, err := r.ensureTenantNamespace(ctx, s); err != nil || out == step.Waiting {
		return out, err
	}
	images, err := versions.ImagePullSecretNames(s.Version)
	if err != nil {
		s.Obs.PullSecretsNotReady(v1alpha1.ReasonInvalidProviderConfig, fmt.Sprintf("ProviderConfig %q: %s", r.ProviderName, err.Error()))
		return step.Waiting, nil
	}
	s.ImageSecrets = images
	s.Sources = map[string]*corev1.Secret{}
	var problems []string
	reason := ""
	check := func(name, use string) error {
		src, problem, err := r.SourceSecret(ctx, name, use, s.Version.Version)
		if err != nil {
			return err
		}
		if problem != nil {
			problems = append(problems, problem.Message)
			if reason == "" {
				reason = problem.Reason
			}
			return nil
		}
		s.Sources[name] = src
		return nil
	}
	if name := s.Version.ChartPullSecret; name != "" {
		if err := check(name, "chart pull secret"); err != nil {
			return step.Proceed, err
		}
	}
	for _, name := range images {
		if err := check(name, "image pull secret"); err != nil {
			return step.Proceed, err
		}
	}
	if len(problems) > 0 {
		s.Obs.PullSecretsNotReady(reason, problems...)
		return step.Waiting, nil
	}

	if name := s.Version.ChartPullSecret; name != "" {
		cp := flux.NewSecretCopy(s.Kro, r.ProviderName, v1alpha1.RoleChartPullSecret, s.Sources[name], s.TenantNamespace, owned.ChartSecretCopyName(r.ProviderName, name))
		ours, err := owned.CopySecret(ctx, r.Platform, r.PlatformReader, cp)
		if err != nil {
			return step.Proceed, fmt.Errorf("copying chart pull secret %q into %s: %w", name, s.TenantNamespace, err)
		}
		if !ours {
			s.Obs.OwnershipConflict(v1alpha1.ConditionPullSecretsReady,
				owned.ConflictMessage(s.Kro, "secret", "the platform cluster", cp, fmt.Sprintf(
					"use another chart pull secret name in ProviderConfig %q (chartPullSecret of version %s), or delete that secret if nobody needs it",
					r.ProviderName, s.Version.Version)))
			return step.Waiting, nil
		}
		s.ChartSecret = cp.Name
		s.Obs.Managed = append(s.Obs.Managed, flux.ManagedSecret(clusters.Platform, cp))
	}
	if err := r.RemoveChartSecretCopies(ctx, r.Platform, s.Kro, s.TenantNamespace, s.ChartSecret); err != nil {
		return step.Proceed, err
	}
	s.Obs.PullSecretsReady(pullSecretsMessage(s, false))
	return step.Proceed, nil
}

// ReconcileImagePullSecrets copies the version's image pull secrets to where kro runs
// (kro-system on the ControlPlane, or the tenant's namespace on the workload cluster) and
// removes copies that are no longer referenced.
func (r *Copier) ReconcileImagePullSecrets(ctx context.Context, s *step.Scope) (step.Result, error) {
	site := s.Site
	c := site.Cluster.GetClient()
	if len(s.ImageSecrets) > 0 {
		var err error
		if s.Workload != nil {
			err = reach.EnsureWorkloadNamespace(ctx, s.Workload, s.Kro, r.ProviderName)
		} else {
			err = owned.EnsureNamespace(ctx, c, site.Namespace, nil)
		}
		if err != nil {
			return step.Proceed, err
		}
	}
	var conflicts []string
	for _, name := range s.ImageSecrets {
		cp := flux.NewSecretCopy(s.Kro, r.ProviderName, v1alpha1.RoleImagePullSecret, s.Sources[name], site.Namespace, name)
		ours, err := owned.CopySecret(ctx, c, site.Cluster.GetAPIReader(), cp)
		if err != nil {
			return step.Proceed, fmt.Errorf("copying image pull secret %q: %w", name, err)
		}
		if !ours {
			conflicts = append(conflicts, owned.ConflictMessage(s.Kro, "secret", site.Where, cp, fmt.Sprintf(
				"rename the image pull secret in ProviderConfig %q (helmValues.imagePullSecrets of version %s), or delete that secret on %s if nobody needs it",
				r.ProviderName, s.Version.Version, site.Where)))
			continue
		}
		s.Obs.Managed = append(s.Obs.Managed, flux.ManagedSecret(site.Label, cp))
	}
	if err := r.RemoveImageSecretCopies(ctx, c, s.Kro, site.Namespace, s.ImageSecrets); err != nil {
		return step.Proceed, err
	}
	if len(conflicts) > 0 {
		s.Obs.OwnershipConflict(v1alpha1.ConditionPullSecretsReady, strings.Join(conflicts, "; "))
		return step.Waiting, nil
	}
	s.Obs.PullSecretsReady(pullSecretsMessage(s, true))
	return step.Proceed, nil
}

func pullSecretsMessage(s *step.Scope, copiedImages bool) string {
	var parts []string
	if s.ChartSecret != "" {
		parts = append(parts, fmt.Sprintf("chart pull secret %q copied to %s/%s", s.Version.ChartPullSecret, s.TenantNamespace, s.ChartSecret))
	}
	if len(s.ImageSecrets) > 0 {
		state := "found, to be copied to where kro runs"
		if copiedImages {
			state = "copied to " + s.Site.Namespace + " on " + s.Site.Where
		}
		parts = append(parts, fmt.Sprintf("image pull secrets %s %s", strings.Join(s.ImageSecrets, ", "), state))
	}
	if len(parts) == 0 {
		return "version " + s.Version.Version + " needs no pull secrets"
	}
	return strings.Join(parts, "; ")
}

// SourceSecret reads a pull secret from the provider's namespace. A secret that is
// missing or of the wrong type is a problem for the platform team to fix, not an error.
func (r *Copier) SourceSecret(ctx context.Context, name, use, version string) (*corev1.Secret, *SecretProblem, error) {
	secret := &corev1.Secret{}
	err := r.Platform.Get(ctx, client.ObjectKey{Namespace: r.PodNamespace, Name: name}, secret)
	if apierrors.IsNotFound(err) {
		return nil, &SecretProblem{v1alpha1.ReasonPullSecretMissing, fmt.Sprintf(
			"secret %q (%s of version %s) not found in namespace %s on the platform cluster: create it with type %s",
			name, use, version, r.PodNamespace, corev1.SecretTypeDockerConfigJson)}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading secret %s/%s: %w", r.PodNamespace, name, err)
	}
	if secret.Type != corev1.SecretTypeDockerConfigJson {
		return nil, &SecretProblem{v1alpha1.ReasonPullSecretWrongType, fmt.Sprintf(
			"secret %q (%s of version %s) in namespace %s has type %q, expected %s",
			name, use, version, r.PodNamespace, secret.Type, corev1.SecretTypeDockerConfigJson)}, nil
	}
	return secret, nil, nil
}

// VersionProblems reads every pull secret a version names (its chartPullSecret and the
// image pull secrets of its Helm values) and returns what is wrong with them, as the
// ProviderConfig reports it and `preflight` prints it. revision names the revision the
// version was read from, for the messages: "" for the version in spec.versions.
func (r *Copier) VersionProblems(ctx context.Context, v *v1alpha1.KroVersion, revision string) ([]SecretProblem, error) {
	images, err := versions.ImagePullSecretNames(v)
	if err != nil {
		msg := err.Error()
		if revision != "" {
			msg = "revision " + revision + ": " + msg
		}
		return []SecretProblem{{Reason: v1alpha1.ReasonInvalidProviderConfig, Message: msg}}, nil
	}
	of := ""
	if revision != "" {
		of = " of revision " + revision
	}
	var problems []SecretProblem
	check := func(name, use string) error {
		_, problem, err := r.SourceSecret(ctx, name, use+of, v.Version)
		if problem != nil {
			problems = append(problems, *problem)
		}
		return err
	}
	if v.ChartPullSecret != "" {
		if err := check(v.ChartPullSecret, "chart pull secret"); err != nil {
			return nil, err
		}
	}
	for _, name := range images {
		if err := check(name, "image pull secret"); err != nil {
			return nil, err
		}
	}
	return problems, nil
}

// SecretProblem is what is wrong with a source pull secret, for the condition.
type SecretProblem struct {
	Reason, Message string
}

// RemoveChartSecretCopies deletes the copies of chart pull secrets in the tenant
// namespace except keep ("" removes all).
func (r *Copier) RemoveChartSecretCopies(ctx context.Context, c client.Reader, kro *v1alpha1.Kro, namespace, keep string) error {
	list := &corev1.SecretList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), owned.CopyLabels(kro, r.ProviderName, v1alpha1.RoleChartPullSecret)); err != nil {
		return fmt.Errorf("listing chart pull secret copies in %s: %w", namespace, err)
	}
	return r.deleteSecrets(ctx, r.Platform, list.Items, func(name string) bool { return name == keep })
}

// RemoveImageSecretCopies deletes the copies of image pull secrets in namespace (where
// kro runs) except those named in keep.
func (r *Copier) RemoveImageSecretCopies(ctx context.Context, c client.Client, kro *v1alpha1.Kro, namespace string, keep []string) error {
	list := &corev1.SecretList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), owned.CopyLabels(kro, r.ProviderName, v1alpha1.RoleImagePullSecret)); err != nil {
		return fmt.Errorf("listing image pull secret copies in %s: %w", namespace, err)
	}
	return r.deleteSecrets(ctx, c, list.Items, func(name string) bool { return slices.Contains(keep, name) })
}

// deleteSecrets deletes the provider's copies among secrets, except those keep names.
// Only a secret that carries the provider's labels is deleted, and only the very object
// that was listed (its UID is a precondition): a secret of the same name that someone
// made since is left alone.
func (r *Copier) deleteSecrets(ctx context.Context, c client.Client, secrets []corev1.Secret, keep func(string) bool) error {
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

// ensureTenantNamespace creates the tenant namespace when openmcp has not (standalone use).
func (r *Copier) ensureTenantNamespace(ctx context.Context, s *step.Scope) (step.Result, error) {
	ns := &corev1.Namespace{}
	err := r.PlatformReader.Get(ctx, client.ObjectKey{Name: s.TenantNamespace}, ns)
	switch {
	case err == nil && !ns.DeletionTimestamp.IsZero():
		s.Obs.PullSecretsNotReady(v1alpha1.ReasonReconciling,
			fmt.Sprintf("waiting for the tenant namespace %s on the platform cluster to finish terminating", s.TenantNamespace))
		return step.Waiting, nil
	case err == nil:
		return step.Proceed, nil
	case !apierrors.IsNotFound(err):
		return step.Proceed, fmt.Errorf("reading tenant namespace %s: %w", s.TenantNamespace, err)
	}
	if err := r.Platform.Create(ctx, flux.NewTenantNamespace(s.Kro, r.ProviderName, s.TenantNamespace)); client.IgnoreAlreadyExists(err) != nil {
		return step.Proceed, fmt.Errorf("creating tenant namespace %s: %w", s.TenantNamespace, err)
	}
	return step.Proceed, nil
}
