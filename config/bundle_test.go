package config

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestBundlePinsTheImage renders each overlay as a release bundle from the config folder
// alone, with the image pinned by digest: the bundle holds the same objects as the
// overlay, and the only image of the platform bundle is repository@digest.
func TestBundlePinsTheImage(t *testing.T) {
	image := Image{Repository: "registry.example:5000/images/service-provider-kro", Tag: "v9.9.9",
		Digest: "sha256:" + strings.Repeat("ab", 32)}
	for _, overlay := range []string{OnboardingOverlay, PlatformOverlay} {
		t.Run(overlay, func(t *testing.T) {
			data, err := Bundle(overlay, image)
			if err != nil {
				t.Fatal(err)
			}
			got := bundleObjects(t, data)
			want := render(t, overlay)
			if len(got) != len(want) {
				t.Fatalf("the bundle holds %d objects, the overlay %d", len(got), len(want))
			}
			for i := range want {
				if got[i].GetKind() != want[i].GetKind() || got[i].GetName() != want[i].GetName() {
					t.Errorf("object %d: the bundle has %s %s, the overlay %s %s", i, got[i].GetKind(), got[i].GetName(), want[i].GetKind(), want[i].GetName())
				}
			}
			images := bundleImages(got)
			if overlay == OnboardingOverlay {
				if len(images) != 0 {
					t.Errorf("the onboarding bundle runs images %v, want none", images)
				}
				return
			}
			if len(images) != 1 || images[0] != image.Reference() {
				t.Errorf("the platform bundle runs %v, want only %s", images, image.Reference())
			}
		})
	}
}

// TestBundleRefusesABadImage: no repository, or a digest that is not sha256, is an error
// rather than a bundle that cannot pull.
func TestBundleRefusesABadImage(t *testing.T) {
	for _, image := range []Image{{Tag: "v1"}, {Repository: "r"}, {Repository: "r", Digest: "md5:00"}} {
		if _, err := Bundle(PlatformOverlay, image); err == nil {
			t.Errorf("Bundle with %+v: no error", image)
		}
	}
}

func bundleObjects(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---\n") {
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("the bundle is not YAML: %v", err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
	return out
}

// bundleImages lists the images of every container of every Deployment.
func bundleImages(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			if img, ok := c.(map[string]any)["image"].(string); ok {
				out = append(out, img)
			}
		}
	}
	return out
}
