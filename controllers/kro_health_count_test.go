package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
)

// TestCountInstanceSetsNewOnesApart: an instance created after the admission is counted
// in NewInstances and not named; one of the admission's second is an old one.
func TestCountInstanceSetsNewOnesApart(t *testing.T) {
	g := NewWithT(t)
	since := rollouttest.T0
	at := func(name string, created time.Time) *listedInstance {
		i := &listedInstance{}
		i.Metadata.Namespace, i.Metadata.Name = "team-a", name
		i.Metadata.CreationTimestamp = metav1.NewTime(created)
		return i
	}
	h := &v1alpha1.RolloutHealth{}
	countInstance(h, "Shop", at("old", since.Add(-time.Hour)), since)
	countInstance(h, "Shop", at("same-second", since), since)
	countInstance(h, "Shop", at("new", since.Add(time.Second)), since)
	g.Expect(h.Instances).To(Equal(v1alpha1.InstanceCounts{Total: 2}))
	g.Expect(h.NewInstances).To(Equal(&v1alpha1.InstanceCounts{Total: 1}))
	g.Expect(h.NotReady).To(HaveLen(2))
	g.Expect(h.NotReady[1].Name).To(Equal("same-second"))
}
