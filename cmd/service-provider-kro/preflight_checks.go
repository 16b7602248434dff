package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/handover"
	"github.com/openmcp-project/service-provider-kro/controllers/pullsecrets"
	"github.com/openmcp-project/service-provider-kro/controllers/step"
	"github.com/openmcp-project/service-provider-kro/controllers/versions"
)

// The names of this API's CRDs, which init replaces in place.
const (
	kroCRD            = "kroes.kro.services.open-control-plane.io"
	providerConfigCRD = "providerconfigs.kro.services.open-control-plane.io"
)

// checkOlderGroup looks for CRDs of the older API group on both clusters: their objects
// are not this provider's to serve.
func (p *preflightRun) checkOlderGroup(ctx context.Context) error {
	found := false
	for _, cl := range []struct {
		name string
		c    client.Client
	}{{"onboarding", p.onboarding}, {"platform", p.platform}} {
		var crds apiextensionsv1.CustomResourceDefinitionList
		if err := cl.c.List(ctx, &crds); err != nil {
			return fmt.Errorf("preflight: listing the CRDs of the %s cluster: %w", cl.name, err)
		}
		for _, c := range crds.Items {
			if c.Spec.Group != olderGroup {
				continue
			}
			found = true
			n, err := countObjects(ctx, cl.c, &c)
			if err != nil {
				return fmt.Errorf("preflight: counting the objects of CRD %s on the %s cluster: %w", c.Name, cl.name, err)
			}
			if n == 0 {
				p.noteThat("CRD %s of the older API group %s is on the %s cluster, with no objects: delete it", c.Name, olderGroup, cl.name)
				continue
			}
			p.toFix("%s of the older API group %s on the %s cluster (CRD %s): this provider serves %s only and would leave them alone; create them anew in %s and delete the old ones",
				plural(n, c.Spec.Names.Kind+" object"), olderGroup, cl.name, c.Name, v1alpha1.GroupVersion.Group, v1alpha1.GroupVersion.Group)
		}
	}
	if !found {
		p.ok("no CRD of the older API group %s on either cluster", olderGroup)
	}
	return nil
}

// countObjects counts the objects of a CRD's storage version.
func countObjects(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition) (int, error) {
	version := ""
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			version = v.Name
		}
	}
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion(crd.Spec.Group + "/" + version)
	list.SetKind(crd.Spec.Names.ListKind)
	if err := c.List(ctx, list); err != nil {
		return 0, err
	}
	return len(list.Items), nil
}

// checkProviderConfig reads the ProviderConfig as stored and checks it against this
// release's CRD: one it refuses would keep every Kro from resolving its version.
func (p *preflightRun) checkProviderConfig(ctx context.Context) error {
	pc := &unstructured.Unstructured{}
	pc.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ProviderConfig"))
	switch err := p.platform.Get(ctx, client.ObjectKey{Name: p.opts.providerName}, pc); {
	case meta.IsNoMatchError(err):
		p.toFix("the platform cluster has no ProviderConfig CRD (%s): run service-provider-kro init, then create ProviderConfig %q with the versions on offer", providerConfigCRD, p.opts.providerName)
		return nil
	case apierrors.IsNotFound(err):
		p.toFix("ProviderConfig %q is not on the platform cluster: every Kro would wait with ProviderConfigMissing; create it with the versions on offer (config/samples/platform)", p.opts.providerName)
		return nil
	case err != nil:
		return fmt.Errorf("preflight: reading ProviderConfig %q: %w", p.opts.providerName, err)
	}
	schema, err := schemaOf(providerConfigCRD)
	if err != nil {
		return err
	}
	errs, dropped := schema.check(ctx, pc.Object)
	if len(dropped) > 0 {
		p.noteThat("ProviderConfig %q has fields this release does not know, which the API server will drop: %s", p.opts.providerName, strings.Join(dropped, ", "))
	}
	if len(errs) > 0 {
		p.toFix("ProviderConfig %q does not pass this release's validation, so the provider could not write its status and a change to it would be refused: %s; correct it before the switch",
			p.opts.providerName, fieldErrors(errs))
	}
	typed := &v1alpha1.ProviderConfig{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(pc.Object, typed); err != nil {
		p.toFix("ProviderConfig %q cannot be read as this release's ProviderConfig: %v", p.opts.providerName, err)
		return nil
	}
	p.offered = versions.OfferedVersions(typed)
	if len(errs) == 0 {
		p.ok("ProviderConfig %q passes this release's validation; it offers %s", p.opts.providerName, strings.Join(p.offered, ", "))
	}
	p.pc = typed
	return nil
}

// checkKros checks every Kro against this release's CRD and the versions on offer.
func (p *preflightRun) checkKros(ctx context.Context) error {
	kros := &unstructured.UnstructuredList{}
	kros.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("KroList"))
	switch err := p.onboarding.List(ctx, kros); {
	case meta.IsNoMatchError(err):
		p.noteThat("the onboarding cluster has no Kro CRD (%s) yet: service-provider-kro init installs it", kroCRD)
		return nil
	case err != nil:
		return fmt.Errorf("preflight: listing the Kros: %w", err)
	}
	schema, err := schemaOf(kroCRD)
	if err != nil {
		return err
	}
	var notOffered []string
	for _, k := range kros.Items {
		key := k.GetNamespace() + "/" + k.GetName()
		if errs, _ := schema.check(ctx, k.Object); len(errs) > 0 {
			p.toFix("Kro %s does not pass this release's validation: %s", key, fieldErrors(errs))
		}
		version, _, _ := unstructured.NestedString(k.Object, "spec", "version")
		if p.offered != nil && !slices.Contains(p.offered, version) {
			notOffered = append(notOffered, fmt.Sprintf("%s (%q)", key, version))
		}
	}
	if len(notOffered) > 0 {
		p.toFix("%s on a version ProviderConfig %q does not offer would wait with VersionNotOffered: %s; offer the version or change the Kro's spec.version (offered: %s)",
			plural(len(notOffered), "Kro"), p.opts.providerName, strings.Join(notOffered, ", "), strings.Join(p.offered, ", "))
	}
	if p.offered != nil && len(notOffered) == 0 {
		p.ok("%s, each asking for a version on offer", plural(len(kros.Items), "Kro"))
	}
	return nil
}

// checkPullSecrets checks the pull secrets every version names as the ProviderConfig's
// status would: in the provider's namespace, with the right type.
func (p *preflightRun) checkPullSecrets(ctx context.Context) error {
	if p.pc == nil {
		return nil
	}
	if p.opts.podNamespace == "" {
		p.noteThat("pull secrets not checked: give --pod-namespace, the provider's namespace on the platform cluster")
		return nil
	}
	secrets := &pullsecrets.Copier{Clients: step.Clients{Platform: p.platform, PodNamespace: p.opts.podNamespace, ProviderName: p.opts.providerName}}
	var problems []string
	for i := range p.pc.Spec.Versions {
		found, err := secrets.VersionProblems(ctx, &p.pc.Spec.Versions[i], "")
		if err != nil {
			return fmt.Errorf("preflight: %w", err)
		}
		for _, problem := range found {
			problems = append(problems, problem.Message)
		}
	}
	if len(problems) > 0 {
		p.toFix("pull secrets: %s; the Kros on these versions would wait with PullSecretsReady False", strings.Join(problems, "; "))
		return nil
	}
	p.ok("the pull secrets the versions name are in namespace %s with type %s", p.opts.podNamespace, corev1.SecretTypeDockerConfigJson)
	return nil
}

// checkEarlierInstallations counts the installations of kro that the earlier provider
// made, which this one takes over in place.
func (p *preflightRun) checkEarlierInstallations(ctx context.Context) error {
	var hrs helmv2.HelmReleaseList
	err := p.platform.List(ctx, &hrs, client.MatchingFields{"metadata.name": handover.EarlierHelmReleaseName})
	if meta.IsNoMatchError(err) {
		p.toFix("the platform cluster has no HelmRelease CRD: install Flux (source-controller and helm-controller) there first")
		return nil
	}
	if err != nil {
		return fmt.Errorf("preflight: listing HelmReleases: %w", err)
	}
	earlier := 0
	for i := range hrs.Items {
		if handover.IsEarlierRelease(&hrs.Items[i]) {
			earlier++
		}
	}
	if earlier > 0 {
		p.noteThat("%s of kro by the earlier provider (HelmRelease %s): this provider takes them over in place, without an uninstall; stop the earlier provider before starting this one (docs/migration.md, \"Taking over from the earlier provider\")",
			plural(earlier, "installation"), handover.EarlierHelmReleaseName)
		return nil
	}
	p.ok("no installation of kro by the earlier provider to take over")
	return nil
}

// plural counts n things: "1 Kro", "2 Kros".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
