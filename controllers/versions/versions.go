// Package versions reads what a ProviderConfig offers: a version's entry, its chart URL,
// pull secrets and Helm values, and the poll interval. It reads no cluster.
package versions

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// ChartURL normalises a version's chart URL: the default when empty, oci:// when no
// scheme is given.
func ChartURL(v *v1alpha1.KroVersion) string {
	u := strings.TrimSpace(v.ChartURL)
	switch {
	case u == "":
		return v1alpha1.DefaultChartURL
	case strings.Contains(u, "://"):
		return u
	default:
		return "oci://" + u
	}
}

// ImagePullSecretNames reads helmValues.imagePullSecrets[].name of a version.
func ImagePullSecretNames(v *v1alpha1.KroVersion) ([]string, error) {
	if v.HelmValues == nil || len(v.HelmValues.Raw) == 0 {
		return nil, nil
	}
	var values struct {
		ImagePullSecrets []struct {
			Name string `json:"name"`
		} `json:"imagePullSecrets"`
	}
	if err := json.Unmarshal(v.HelmValues.Raw, &values); err != nil {
		return nil, fmt.Errorf("helmValues.imagePullSecrets of version %q must be a list of objects with a name", v.Version)
	}
	var names []string
	seen := map[string]bool{}
	for i, s := range values.ImagePullSecrets {
		if s.Name == "" {
			return nil, fmt.Errorf("helmValues.imagePullSecrets[%d] of version %q has no name", i, v.Version)
		}
		if !seen[s.Name] {
			seen[s.Name] = true
			names = append(names, s.Name)
		}
	}
	return names, nil
}

// FindVersion is the ProviderConfig's entry for the version, or nil when it is not offered.
func FindVersion(pc *v1alpha1.ProviderConfig, version string) *v1alpha1.KroVersion {
	for i := range pc.Spec.Versions {
		if pc.Spec.Versions[i].Version == version {
			return &pc.Spec.Versions[i]
		}
	}
	return nil
}

// OfferedVersions are the versions the ProviderConfig offers, in its order.
func OfferedVersions(pc *v1alpha1.ProviderConfig) []string {
	out := make([]string, 0, len(pc.Spec.Versions))
	for _, v := range pc.Spec.Versions {
		out = append(out, v.Version)
	}
	return out
}

// PollInterval is the ProviderConfig's poll interval, or the default.
func PollInterval(pc *v1alpha1.ProviderConfig) time.Duration {
	if pc.Spec.PollInterval != nil && pc.Spec.PollInterval.Duration > 0 {
		return pc.Spec.PollInterval.Duration
	}
	return DefaultPollInterval()
}

// VersionValues are the version's Helm values as a map.
func VersionValues(v *v1alpha1.KroVersion) (map[string]any, error) {
	values, err := ValuesMap(v.HelmValues)
	if err != nil {
		return nil, fmt.Errorf("version %s: %w", v.Version, err)
	}
	return values, nil
}

// ValuesMap is Helm values as a map; none give an empty one.
func ValuesMap(raw *apiextensionsv1.JSON) (map[string]any, error) {
	values := map[string]any{}
	if raw != nil && len(raw.Raw) > 0 {
		if err := json.Unmarshal(raw.Raw, &values); err != nil {
			return nil, fmt.Errorf("helmValues: %w", err)
		}
	}
	return values, nil
}

// DefaultPollInterval is the poll interval of a ProviderConfig that sets none.
func DefaultPollInterval() time.Duration {
	d, _ := time.ParseDuration(v1alpha1.DefaultPollInterval)
	return d
}
