package clusters

import (
	"context"
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Claimant is an installation that claims the onboarding cluster, with what its
// platform cluster shows of its past there.
type Claimant struct {
	Installation
	// Trace names what shows that the installation ran on its platform cluster before
	// (FindTrace); empty when nothing does. An earlier version's claim names the
	// environment only, not the platform cluster it came from: only with a trace is
	// such a claim of the installation's environment its own to take over.
	Trace string
}

// FindTrace looks on the platform cluster for a sign that installation self ran there
// before: a Lease of its leader election (service-provider-<name>) or of one of its
// shards (service-provider-<name>-<shard id>) in its namespace. A provider writes
// these only after it has claimed the onboarding cluster, so one found before the
// claim was written by an earlier run of the installation, not by this one. It finds
// none without the namespace, and none for a single replica without leader election.
func FindTrace(ctx context.Context, platform client.Reader, self Installation) (string, error) {
	if self.Namespace == "" {
		return "", nil
	}
	var leases coordinationv1.LeaseList
	if err := platform.List(ctx, &leases, client.InNamespace(self.Namespace)); err != nil {
		return "", fmt.Errorf("looking for the Leases of provider %q in namespace %s on the platform cluster: %w", self.Provider, self.Namespace, err)
	}
	name := LeaseName(self.Provider)
	for _, l := range leases.Items {
		if l.Name == name || strings.HasPrefix(l.Name, name+"-") {
			return fmt.Sprintf("Lease %s/%s", l.Namespace, l.Name), nil
		}
	}
	return "", nil
}

// LeaseName is the name of the leader-election Lease of provider; its shards' Leases
// add "-<shard id>".
func LeaseName(provider string) string { return "service-provider-" + provider }
