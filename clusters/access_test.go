package clusters

import (
	"strings"
	"testing"

	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	commonapi "github.com/openmcp-project/openmcp-operator/api/common"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNewAccessRequestNamesAreValidForLongIdentities(t *testing.T) {
	for _, id := range []types.NamespacedName{
		{Namespace: "project-a--ws-b", Name: "cp-1"},
		{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("c", 63)},
	} {
		ar, err := NewAccessRequest("kro", id)
		if err != nil {
			t.Fatal(err)
		}
		if errs := validation.IsDNS1123Subdomain(ar.Name); len(errs) > 0 || len(ar.Name) > 63 {
			t.Errorf("name %q of %v is invalid: %v", ar.Name, id, errs)
		}
		if errs := validation.IsDNS1123Label(ar.Namespace); len(errs) > 0 {
			t.Errorf("namespace %q of %v is invalid: %v", ar.Namespace, id, errs)
		}
		for k, v := range ar.Labels {
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Errorf("label %s=%q of %v is invalid: %v", k, v, id, errs)
			}
		}
		if ar.Spec.RequestRef.Name != id.Name || ar.Spec.RequestRef.Namespace != ar.Namespace {
			t.Errorf("requestRef %+v does not point at the ControlPlane's ClusterRequest", ar.Spec.RequestRef)
		}
	}
	a, _ := NewAccessRequest("kro", types.NamespacedName{Namespace: "a", Name: "b"})
	b, _ := NewAccessRequest("kro", types.NamespacedName{Namespace: "a", Name: "b"})
	if a.Name != b.Name || a.Namespace != b.Namespace {
		t.Errorf("names are not stable: %s/%s vs %s/%s", a.Namespace, a.Name, b.Namespace, b.Name)
	}
}

func TestGrantedSecret(t *testing.T) {
	ar := &clustersv1alpha1.AccessRequest{}
	ar.Namespace, ar.Name = "mcp--x", "kro--cp--mcp"
	if _, err := GrantedSecret(ar); err == nil || !strings.Contains(err.Error(), "waiting for openmcp to grant") {
		t.Errorf("pending: %v", err)
	}
	ar.Status.Phase = clustersv1alpha1.REQUEST_DENIED
	if _, err := GrantedSecret(ar); err == nil || !strings.Contains(err.Error(), "denied") {
		t.Errorf("denied: %v", err)
	}
	ar.Status.Phase = clustersv1alpha1.REQUEST_GRANTED
	if _, err := GrantedSecret(ar); err == nil || !strings.Contains(err.Error(), "names no secret") {
		t.Errorf("granted without secret: %v", err)
	}
	ar.Status.SecretRef = &commonapi.LocalObjectReference{Name: "access"}
	if name, err := GrantedSecret(ar); err != nil || name != "access" {
		t.Errorf("granted: %q, %v", name, err)
	}
}
