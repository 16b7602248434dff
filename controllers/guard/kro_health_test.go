package guard

import (
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/rollout/rollouttest"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
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

func TestInstanceAndDeploymentReadiness(t *testing.T) {
	g := NewWithT(t)
	i := &listedInstance{Status: json.RawMessage(`{"conditions":[{"type":"InstanceManaged","status":"True"},` +
		`{"type":"Ready","status":"False","reason":"ResourcesNotReady","message":"skipped"}],"other":{"large":"skipped"}}`)}
	ready, reason := instanceReady(i.instanceConditions())
	g.Expect(ready).To(BeFalse())
	g.Expect(reason).To(Equal("ResourcesNotReady"))
	_, reason = instanceReady((&listedInstance{}).instanceConditions())
	g.Expect(reason).To(Equal("NoReadyCondition"))
	_, reason = instanceReady((&listedInstance{Status: json.RawMessage(`{"conditions":"not a list"}`)}).instanceConditions())
	g.Expect(reason).To(Equal("NoReadyCondition"), "conditions of another shape are none")

	d := testenv.AvailableKroDeployment()
	ok, _ := deploymentDone(d)
	g.Expect(ok).To(BeTrue())
	d.Generation = 3
	ok, msg := deploymentDone(d)
	g.Expect(ok).To(BeFalse())
	g.Expect(msg).To(ContainSubstring("generation 3 not yet observed"))
	d.Status.ObservedGeneration, d.Status.UpdatedReplicas = 3, 1
	ok, _ = deploymentDone(d)
	g.Expect(ok).To(BeFalse(), "one of two replicas updated")
}
