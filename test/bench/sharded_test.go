package bench

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmcp-project/service-provider-kro/providers/sharding"
)

func TestOwnershipWindows(t *testing.T) {
	var keys []string
	for i := range 50 {
		keys = append(keys, fmt.Sprintf("bench/cp-%04d", i))
	}
	all := []string{"a", "b", "c"}
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	changes := []viewChange{
		{at(0), "a", all}, {at(0), "b", all}, {at(0), "c", all},
		// c is cut off: a drops it at 100 ms, b at 300 ms, c steps back at 500 ms.
		{at(100), "a", []string{"a", "b"}},
		{at(300), "b", []string{"a", "b"}},
		{at(500), "c", nil},
	}
	ws := ownershipWindows(changes, keys)
	if len(ws) != 1 {
		t.Fatalf("windows %+v, want one", ws)
	}
	w := ws[0]
	if !w.start.Equal(at(100)) || !w.end.Equal(at(500)) {
		t.Fatalf("window %s to %s, want 100 ms to 500 ms", w.start, w.end)
	}
	// The Kros owned twice are c's that a or b takes over.
	var want []string
	for _, k := range keys {
		if sharding.Owner(k, all) == "c" {
			want = append(want, k)
		}
	}
	var got []string
	for k := range w.kros {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("Kros owned twice %v, want c's %v", got, want)
	}
	// No overlap when c steps back before the others drop it.
	clean := []viewChange{
		{at(0), "a", all}, {at(0), "b", all}, {at(0), "c", all},
		{at(100), "c", nil}, {at(300), "a", []string{"a", "b"}}, {at(400), "b", []string{"a", "b"}},
	}
	if ws := ownershipWindows(clean, keys); len(ws) != 0 {
		t.Fatalf("windows %+v, want none", ws)
	}
	// ownedBetween: c owns its keys until it steps back.
	slices.SortStableFunc(changes, func(a, b viewChange) int { return a.at.Compare(b.at) })
	if !ownedBetween(changes, "c", want[0], at(400), at(450)) || ownedBetween(changes, "c", want[0], at(600), at(700)) {
		t.Fatalf("ownedBetween wrong for c and %s", want[0])
	}
	if !ownedBetween(changes, "c", want[0], at(-100), at(50)) {
		t.Fatalf("ownedBetween: c owns %s from 0 ms", want[0])
	}
}

func TestChangedManagers(t *testing.T) {
	e := func(m string, sec int64, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: m, Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: time.Unix(sec, 0)},
			FieldsV1: metav1.NewFieldsV1(fields)}
	}
	before := []metav1.ManagedFieldsEntry{e("x", 1, `{"a":{}}`), e("y", 1, `{"b":{},"c":{}}`)}
	// y wrote (new time) and took a field of x's.
	after := []metav1.ManagedFieldsEntry{e("x", 1, `{}`), e("y", 2, `{"a":{},"b":{},"c":{}}`)}
	if got := changedManagers(before, after); !slices.Equal(got, []string{"y"}) {
		t.Fatalf("changed %v, want [y]", got)
	}
	// A new manager wrote.
	if got := changedManagers(before, append(slices.Clone(before), e("z", 1, `{"d":{}}`))); !slices.Equal(got, []string{"z"}) {
		t.Fatalf("changed %v, want [z]", got)
	}
	// Within the same second: the entry that grew.
	if got := changedManagers(before, []metav1.ManagedFieldsEntry{e("x", 1, `{"a":{},"d":{}}`), before[1]}); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("changed %v, want [x]", got)
	}
}
