package controlplane_test

import (
	"maps"
	"net/http"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/openmcp-project/service-provider-kro/providers/controlplane"
)

type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// TestRESTMapperKnowsTheProvidersKinds: the kinds the provider uses on a ControlPlane
// map without a request, exactly as the API server's discovery maps them; other kinds
// are discovered.
func TestRESTMapperKnowsTheProvidersKinds(t *testing.T) {
	withProvider(t)
	g := NewWithT(t)
	hc, err := rest.HTTPClientFor(cpA.Config) // cpA has kro's CRDs
	g.Expect(err).NotTo(HaveOccurred())
	counter := &countingTransport{next: hc.Transport}
	hc.Transport = counter
	mapper, err := controlplane.NewRESTMapper(rgdKind)(cpA.Config, hc)
	g.Expect(err).NotTo(HaveOccurred())

	plainHC, err := rest.HTTPClientFor(cpA.Config)
	g.Expect(err).NotTo(HaveOccurred())
	discovered, err := apiutil.NewDynamicRESTMapper(cpA.Config, plainHC)
	g.Expect(err).NotTo(HaveOccurred())

	all := maps.Clone(controlplane.BuiltinKinds)
	maps.Copy(all, rgdKind)
	for item, scope := range all {
		for _, gvk := range []schema.GroupVersionKind{item, item.GroupVersion().WithKind(item.Kind + "List")} {
			known(g, mapper, discovered, gvk, scope)
		}
	}
	g.Expect(counter.n.Load()).To(BeZero(), "known kinds must not cause discovery")

	m, err := mapper.RESTMapping(schema.GroupKind{Kind: "ConfigMap"}, "v1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Resource.Resource).To(Equal("configmaps"))
	g.Expect(counter.n.Load()).To(BeNumerically(">", 0), "other kinds are discovered")

	_, err = mapper.RESTMapping(schema.GroupKind{Group: "example.com", Kind: "Nothing"}, "v1")
	g.Expect(err).To(HaveOccurred())
}

// known checks one known kind: mapped as discovery maps it, with and without a version.
func known(g Gomega, mapper, discovered meta.RESTMapper, gvk schema.GroupVersionKind, scope meta.RESTScope) {
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	g.Expect(err).NotTo(HaveOccurred(), "%s", gvk)
	want, err := discovered.RESTMapping(gvk.GroupKind(), gvk.Version)
	g.Expect(err).NotTo(HaveOccurred(), "%s", gvk)
	g.Expect(m.Resource).To(Equal(want.Resource), "%s", gvk)
	g.Expect(m.Scope.Name()).To(Equal(want.Scope.Name()), "%s", gvk)
	g.Expect(m.Scope.Name()).To(Equal(scope.Name()), "%s", gvk)
	_, err = mapper.RESTMapping(gvk.GroupKind())
	g.Expect(err).NotTo(HaveOccurred(), "%s", gvk)
}
