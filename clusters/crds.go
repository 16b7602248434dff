package clusters

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldOwner is the server-side apply field manager of everything the provider writes.
const FieldOwner = client.FieldOwner("service-provider-kro")

// InstallCRDs applies the CRDs with server-side apply and waits until each is
// established. Applying the same CRDs again changes nothing on the server; a changed
// CRD is upgraded in place. It returns the names of the CRDs whose stored object changed.
func InstallCRDs(ctx context.Context, c client.Client, crds []*apiextensionsv1.CustomResourceDefinition) ([]string, error) {
	var changed []string
	for _, crd := range crds {
		before := &apiextensionsv1.CustomResourceDefinition{}
		beforeRV := ""
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), before); err == nil {
			beforeRV = before.ResourceVersion
		} else if client.IgnoreNotFound(err) != nil {
			return changed, fmt.Errorf("reading CRD %s: %w", crd.Name, err)
		}

		obj := crd.DeepCopy()
		obj.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
		obj.ResourceVersion = ""
		obj.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
		//nolint:staticcheck // client.Apply with a typed object is what controller-runtime v0.24 offers for CRDs.
		if err := c.Patch(ctx, obj, client.Apply, FieldOwner, client.ForceOwnership); err != nil {
			return changed, fmt.Errorf("applying CRD %s: %w", crd.Name, err)
		}
		if obj.ResourceVersion != beforeRV {
			changed = append(changed, crd.Name)
		}
		if err := waitEstablished(ctx, c, crd.Name); err != nil {
			return changed, err
		}
	}
	return changed, nil
}

func waitEstablished(ctx context.Context, c client.Client, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CRD %s to be established: %w", name, err)
	}
	return nil
}
