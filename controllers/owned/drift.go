package owned

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/clusters"
)

// The provider's objects carry exactly what it applies. Server-side apply alone does not
// see to that: it removes only fields the applier owns and no longer sends, so a value
// that `kubectl patch` adds to a HelmRelease's spec.values stays for good, and
// helm-controller installs it. Flux's own appliers take such fields over before they
// apply (fluxcd/pkg/ssa); the provider does the same, for the fields that make up what it
// vouches for (driftFields): their owners' managedFields entries are moved into the
// provider's apply entry (takeOver), and the apply that follows removes what it does not
// send. Everything else other managers write stays theirs: helm-controller's and
// source-controller's finalizer and status, the flux CLI's annotations
// (reconcile.fluxcd.io/requestedAt), and spec.suspend, which platform teams set on
// purpose (`flux suspend`) and the Kro reports instead (docs/api.md, "Drift").

// driftFields are the top-level fields of another manager's entry that the provider
// takes over; of metadata only the labels (they select the Flux shard and the provider's
// cache). spec.suspend is cut out of spec below.
var driftFields = map[string]bool{"f:spec": true, "f:data": true, "f:stringData": true, "f:type": true}

const (
	fieldMetadata = "f:metadata"
	fieldLabels   = "f:labels"
	fieldSpec     = "f:spec"
	fieldSuspend  = "f:suspend"
	// fieldSelf is a set's member for the field itself (its presence), not its content.
	fieldSelf = "."
)

// fieldSet is a managedFields entry's FieldsV1, parsed.
type fieldSet = map[string]any

// splitDrift splits another manager's fields into those the provider takes over and the
// rest, which stay that manager's.
func splitDrift(fields fieldSet) (drift, rest fieldSet) {
	drift, rest = fieldSet{}, fieldSet{}
	for k, v := range fields {
		switch {
		case k == fieldSpec:
			spec, _ := v.(fieldSet)
			taken := fieldSet{}
			for sk, sv := range spec {
				if sk == fieldSuspend {
					rest[fieldSpec] = fieldSet{fieldSuspend: sv}
					continue
				}
				taken[sk] = sv
			}
			if len(taken) > 0 {
				drift[fieldSpec] = taken
			}
		case driftFields[k]:
			drift[k] = v
		case k == fieldMetadata:
			meta, _ := v.(fieldSet)
			kept := fieldSet{}
			for mk, mv := range meta {
				if mk == fieldLabels {
					drift[fieldMetadata] = fieldSet{fieldLabels: mv}
					continue
				}
				kept[mk] = mv
			}
			if len(kept) > 0 {
				rest[fieldMetadata] = kept
			}
		default:
			rest[k] = v
		}
	}
	return drift, rest
}

// hasContent tells whether a set names any field beyond the presence of its parents.
func hasContent(set fieldSet) bool {
	for k, v := range set {
		if k == fieldSelf {
			continue
		}
		sub, ok := v.(fieldSet)
		if !ok || len(sub) == 0 || hasContent(sub) {
			return true
		}
	}
	return false
}

// othersEntry tells whether an entry is another manager's write of the object itself
// (not of its status).
func othersEntry(mf metav1.ManagedFieldsEntry) bool {
	return mf.Manager != string(clusters.FieldOwner) && mf.Subresource == "" && mf.FieldsV1 != nil
}

// parseFields reads an entry's FieldsV1.
func parseFields(mf metav1.ManagedFieldsEntry) (fieldSet, error) {
	set := fieldSet{}
	if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &set); err != nil {
		return nil, fmt.Errorf("reading the managed fields of %s: %w", mf.Manager, err)
	}
	return set, nil
}

// WrittenByOthers tells whether another field manager owns a field of the object that
// the provider takes over (its spec but spec.suspend, a secret's data and type, the
// labels): then the object is not as the provider made it.
func WrittenByOthers(current client.Object) bool {
	for _, mf := range current.GetManagedFields() {
		if !othersEntry(mf) {
			continue
		}
		set, err := parseFields(mf)
		if err != nil {
			return true // unreadable: let the apply and takeOver see to it
		}
		if drift, _ := splitDrift(set); hasContent(drift) {
			return true
		}
	}
	return false
}

// SuspendedBy is the field manager other than the provider that set the object's
// spec.suspend, or "" when none did (the provider suspends a HelmRelease itself only
// when it is about to delete it).
func SuspendedBy(current client.Object) string {
	for _, mf := range current.GetManagedFields() {
		if !othersEntry(mf) {
			continue
		}
		set, err := parseFields(mf)
		if err != nil {
			continue
		}
		if spec, ok := set[fieldSpec].(fieldSet); ok && spec[fieldSuspend] != nil {
			return mf.Manager
		}
	}
	return ""
}

// takeOver makes the provider the owner of the fields other managers own that it takes
// over, on the object as the API server has it (reader; the cache's managedFields are
// compacted), so that the apply that follows removes those it does not send. It sends
// nothing when there is nothing to take over. The resourceVersion is a precondition: an
// object changed since is taken over on the next reconcile.
func takeOver(ctx context.Context, c client.Client, reader client.Reader, obj client.Object) error {
	// A fresh object: decoding into a used one would keep what the server no longer has.
	live, ok := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object)
	if !ok {
		return fmt.Errorf("reading %T afresh", obj)
	}
	key := client.ObjectKeyFromObject(obj)
	if err := reader.Get(ctx, key, live); err != nil {
		return client.IgnoreNotFound(err)
	}
	apiVersion := obj.GetObjectKind().GroupVersionKind().GroupVersion().String()
	entries, changed, err := takenOver(live.GetManagedFields(), apiVersion, time.Now())
	if err != nil || !changed {
		return err
	}
	orig, _ := live.DeepCopyObject().(client.Object)
	live.SetManagedFields(entries)
	if err := c.Patch(ctx, live, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), clusters.FieldOwner); err != nil {
		return fmt.Errorf("taking over the fields others wrote on %s: %w", key, err)
	}
	return nil
}

// takenOver is entries with the fields that other managers own and the provider takes
// over moved into the provider's apply entry (made when there is none yet); entries left
// with nothing go. changed is false when there was nothing to move.
func takenOver(entries []metav1.ManagedFieldsEntry, apiVersion string, now time.Time) ([]metav1.ManagedFieldsEntry, bool, error) {
	ours := fieldSet{}
	oursAt := -1
	var out []metav1.ManagedFieldsEntry
	changed := false
	for _, mf := range entries {
		if mf.Manager == string(clusters.FieldOwner) && mf.Operation == metav1.ManagedFieldsOperationApply && mf.Subresource == "" {
			set, err := parseFields(mf)
			if err != nil {
				return nil, false, err
			}
			merge(ours, set)
			oursAt = len(out)
			out = append(out, mf)
			continue
		}
		if !othersEntry(mf) {
			out = append(out, mf)
			continue
		}
		set, err := parseFields(mf)
		if err != nil {
			return nil, false, err
		}
		drift, rest := splitDrift(set)
		if !hasContent(drift) {
			out = append(out, mf)
			continue
		}
		changed = true
		merge(ours, drift)
		if len(rest) == 0 {
			continue
		}
		raw, err := json.Marshal(rest)
		if err != nil {
			return nil, false, fmt.Errorf("writing the managed fields of %s: %w", mf.Manager, err)
		}
		mf.FieldsV1 = metav1.NewFieldsV1(string(raw))
		out = append(out, mf)
	}
	if !changed {
		return entries, false, nil
	}
	raw, err := json.Marshal(ours)
	if err != nil {
		return nil, false, fmt.Errorf("writing the provider's managed fields: %w", err)
	}
	if oursAt < 0 {
		out = append(out, metav1.ManagedFieldsEntry{Manager: string(clusters.FieldOwner), Operation: metav1.ManagedFieldsOperationApply,
			APIVersion: apiVersion, Time: &metav1.Time{Time: now}, FieldsType: "FieldsV1"})
		oursAt = len(out) - 1
	}
	out[oursAt].FieldsV1 = metav1.NewFieldsV1(string(raw))
	return out, true, nil
}

// merge adds the fields of from to into.
func merge(into, from fieldSet) {
	for k, v := range from {
		sub, ok := v.(fieldSet)
		have, okHave := into[k].(fieldSet)
		if ok && okHave {
			merge(have, sub)
			continue
		}
		if ok {
			cp := fieldSet{}
			merge(cp, sub)
			into[k] = cp
			continue
		}
		into[k] = v
	}
}
