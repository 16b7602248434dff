package guard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/foreign"
)

// kro's health on a ControlPlane, as a rollout's gate reads it (rollout/health.go, kro_rollout.go): the
// Ready condition of the instances of the kinds kro generated, and kro's Deployment.
//
// The instances are not cached: a watch of every generated kind would hold every
// instance of every ControlPlane in memory, all the time, for a gate that matters only
// while a rollout updates the Kro. So the Kro reconciler reads them straight from the
// API server, and only in the reconciles of a Kro that a rollout is updating
// (scope.gate): a ControlPlane outside a rollout costs what it did before. kro's
// Deployment is cached, trimmed, as the Kro's KroAvailable condition reads it too
// (kro_deployment.go). The reads go
// to the resources spelled out, so that the engaged cluster's REST mapper does not
// discover, and keep, the generated kinds either. The tenant decides how many instances
// there are and how large: they are read a page at a time and decoded one at a time,
// keeping their names and conditions only (eachInstance).

// kroInstanceReady is the condition kro (v0.9.x) sets on an instance.
const kroInstanceReady = "Ready"

// maxNotReadyInstances bounds the instances that are not Ready named in the status.
const maxNotReadyInstances = 5

// KroDeployment is where kro's Deployment runs: the cluster, the namespace and the Helm
// release, and the cluster's name for messages.
type KroDeployment struct {
	Cluster                   cluster.Cluster
	Namespace, Release, Where string
}

// ReadKroHealth reads the instances' part of kro's health on the ControlPlane, for the
// revision being installed; the caller adds kro's Deployment (ReadKroDeployment).
// Instances created after since (the Kro's admission) are counted apart, in
// NewInstances.
func ReadKroHealth(ctx context.Context, cl cluster.Cluster, revision string, since time.Time) (*v1alpha1.RolloutHealth, error) {
	h := &v1alpha1.RolloutHealth{Revision: revision}
	if err := countInstances(ctx, cl, h, since); err != nil {
		return nil, err
	}
	return h, nil
}

// countInstances counts the instances of every kind kro generated and names a few that
// are not Ready, in the order of their kind's resource, namespace and name (the API
// server lists in that order). Instances are read a page of listPageSize at a time, and
// of each only its name and conditions are kept (eachInstance): the provider's memory
// does not grow with the instances a tenant creates, nor with their size. Those created
// after since are counted apart and not named.
func countInstances(ctx context.Context, cl cluster.Cluster, h *v1alpha1.RolloutHealth, since time.Time) error {
	kinds, err := generatedKinds(ctx, cl)
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cl.GetConfig(), cl.GetHTTPClient())
	if err != nil {
		return err
	}
	for _, k := range kinds {
		err := eachInstance(ctx, dc.RESTClient(), k.gvr, listPageSize, func(i *listedInstance) { countInstance(h, k.kind, i, since) })
		if apierrors.IsNotFound(err) {
			continue // not served (any more)
		}
		if err != nil {
			return fmt.Errorf("listing %s: %w", k.name, err)
		}
	}
	return nil
}

// ListedInstance is what the health read keeps of an instance.
type listedInstance struct {
	Metadata struct {
		Namespace         string      `json:"namespace"`
		Name              string      `json:"name"`
		CreationTimestamp metav1.Time `json:"creationTimestamp"`
	} `json:"metadata"`
	// Status is decoded only for its conditions (instanceConditions): whatever else a
	// tenant put there is skipped.
	Status json.RawMessage `json:"status"`
}

// instanceCondition is what the health read keeps of an instance's condition.
type instanceCondition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// InstanceConditions are the conditions of an instance, none if its status has none in
// the shape kro writes.
func (i *listedInstance) instanceConditions() []instanceCondition {
	var st struct {
		Conditions []instanceCondition `json:"conditions"`
	}
	if len(i.Status) == 0 || json.Unmarshal(i.Status, &st) != nil {
		return nil
	}
	return st.Conditions
}

// eachInstance lists the objects of a resource, pageSize at a time, and hands each to
// fn as it is decoded from the response: the provider holds one object's JSON at a time,
// never a page of them.
func eachInstance(ctx context.Context, rc rest.Interface, gvr schema.GroupVersionResource, pageSize int64, fn func(*listedInstance)) error {
	next := ""
	for {
		req := rc.Get().AbsPath("/apis", gvr.Group, gvr.Version, gvr.Resource).
			Param("limit", strconv.FormatInt(pageSize, 10)).SetHeader("Accept", "application/json")
		if next != "" {
			req = req.Param("continue", next)
		}
		body, err := req.Stream(ctx)
		if err != nil {
			return err
		}
		next, err = decodeInstancePage(body, fn)
		_ = body.Close()
		if err != nil || next == "" {
			return err
		}
	}
}

// decodeInstancePage walks a list's JSON, decoding its items one at a time, and returns
// the list's continue token.
func decodeInstancePage(r io.Reader, fn func(*listedInstance)) (string, error) {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return "", err
	}
	next := ""
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", err
		}
		switch tok {
		case "items":
			if err := decodeItems(dec, fn); err != nil {
				return "", err
			}
		case "metadata":
			var lm metav1.ListMeta
			if err := dec.Decode(&lm); err != nil {
				return "", err
			}
			next = lm.Continue
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", err
			}
		}
	}
	return next, expectDelim(dec, '}')
}

// decodeItems decodes a list's items (null or an array), one at a time.
func decodeItems(dec *json.Decoder, fn func(*listedInstance)) error {
	tok, err := dec.Token()
	if err != nil || tok == nil {
		return err
	}
	if tok != json.Delim('[') {
		return fmt.Errorf("decoding a list: items is %v, not an array", tok)
	}
	for dec.More() {
		i := &listedInstance{}
		if err := dec.Decode(i); err != nil {
			return err
		}
		fn(i)
	}
	return expectDelim(dec, ']')
}

func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("decoding a list: %w", err)
	}
	if tok != d {
		return fmt.Errorf("decoding a list: %v where %v was expected", tok, d)
	}
	return nil
}

// CountInstance adds one instance to the counts: to NewInstances when it was created
// after since. Creation times and since are kept to the second; an instance of the
// admission's second counts as old.
func countInstance(h *v1alpha1.RolloutHealth, kind string, i *listedInstance, since time.Time) {
	ready, reason := instanceReady(i.instanceConditions())
	if i.Metadata.CreationTimestamp.After(since) {
		if h.NewInstances == nil {
			h.NewInstances = &v1alpha1.InstanceCounts{}
		}
		h.NewInstances.Total++
		if ready {
			h.NewInstances.Ready++
		}
		return
	}
	h.Instances.Total++
	if ready {
		h.Instances.Ready++
		return
	}
	if len(h.NotReady) < maxNotReadyInstances {
		h.NotReady = append(h.NotReady, v1alpha1.InstanceState{Kind: kind, Namespace: i.Metadata.Namespace, Name: i.Metadata.Name, Reason: reason})
	}
}

// InstanceReady reads an instance's Ready condition; the reason says why it is not True.
func instanceReady(conds []instanceCondition) (bool, string) {
	for _, c := range conds {
		if c.Type != kroInstanceReady {
			continue
		}
		if c.Status == string(metav1.ConditionTrue) {
			return true, ""
		}
		reason := c.Reason
		if reason == "" {
			reason = c.Status
		}
		return false, foreign.Reason(reason, maxStateReason)
	}
	return false, "NoReadyCondition"
}
