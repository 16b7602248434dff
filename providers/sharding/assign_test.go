package sharding_test

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/multicluster-runtime/pkg/manager/coordinator/sharded/sharder"

	"github.com/openmcp-project/service-provider-kro/providers/sharding"
)

// Names, as the provider sees them: ControlPlanes are keyed "namespace/name" of the
// tenant's Kro object (namespace "project-<p>--ws-<w>"), members are the replicas' pod
// names. Every generator is seeded, so the simulation reports the same figures each run.

// controlPlaneKeys returns n distinct keys in the shapes tenants name their ControlPlanes.
func controlPlaneKeys(n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	projects := []string{"payments", "checkout", "search", "identity", "billing", "platform", "data", "ml", "web", "mobile",
		"iam", "logistics", "crm", "erp", "analytics", "security", "devops", "sre", "hr", "finance"}
	workspaces := []string{"dev", "qa", "staging", "prod", "sandbox", "eu", "us", "apac", "team-a", "team-b"}
	regions := []string{"eu10", "eu20", "us10", "us20", "ap10", "jp10", "br10"}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	seen := make(map[string]bool, n)
	keys := make([]string, 0, n)
	for len(keys) < n {
		var k string
		switch rng.IntN(4) {
		case 0:
			k = fmt.Sprintf("project-%d--ws-%d/mcp-%d", rng.IntN(200), rng.IntN(20), rng.IntN(50))
		case 1:
			p := pick(projects)
			k = fmt.Sprintf("project-%s--ws-%s/%s-%s", p, pick(workspaces), p, pick(regions))
		case 2:
			k = fmt.Sprintf("project-%s-%d--ws-%s/cp-%03d", pick(projects), rng.IntN(30), pick(workspaces), rng.IntN(1000))
		default:
			k = fmt.Sprintf("project-%s--ws-%s-%d/mcp-%s-%d", pick(projects), pick(workspaces), rng.IntN(10), pick(regions), rng.IntN(100))
		}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// sequentialKeys returns "tenants/cp-00001" and on: names that differ only in their last bytes.
func sequentialKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenants/cp-%05d", i+1)
	}
	return keys
}

// podAlphabet is the alphabet of the random parts of Kubernetes' generated names.
const podAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// podNames returns n distinct names of pods of one Deployment:
// "sp-kro-<pod-template-hash>-<5 random characters>".
func podNames(n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 0x90d))
	random := func(l int) string {
		b := make([]byte, l)
		for i := range b {
			b[i] = podAlphabet[rng.IntN(len(podAlphabet))]
		}
		return string(b)
	}
	prefix := "sp-kro-" + random(9) + "-"
	seen := map[string]bool{}
	names := make([]string, 0, n)
	for len(names) < n {
		if name := prefix + random(5); !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	return names
}

// replicaNames returns "replica-0" to "replica-<n-1>", the names of a StatefulSet's pods.
func replicaNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("replica-%d", i)
	}
	return names
}

// Property tests of Owner.

func TestOwnerWithoutMembers(t *testing.T) {
	for _, members := range [][]string{nil, {}} {
		if got := sharding.Owner("project-a--ws-1/mcp-7", members); got != "" {
			t.Errorf("Owner with members %#v = %q, want \"\"", members, got)
		}
	}
}

func TestOwnerOfOneMember(t *testing.T) {
	for _, k := range controlPlaneKeys(100, 1) {
		if got := sharding.Owner(k, []string{"sp-kro-7d9f8c6b5-x2k4q"}); got != "sp-kro-7d9f8c6b5-x2k4q" {
			t.Fatalf("Owner(%q) of a single member = %q", k, got)
		}
	}
}

// memberCounts are the numbers of members the property tests look at.
var memberCounts = []int{2, 3, 5, 8, 13, 20}

func TestOwnerIsDeterministicAndIndependentOfOrder(t *testing.T) {
	keys := controlPlaneKeys(2000, 2)
	rng := rand.New(rand.NewPCG(2, 2))
	for _, n := range memberCounts {
		members := podNames(n, uint64(n))
		owners := make([]string, len(keys))
		for i, k := range keys {
			owners[i] = sharding.Owner(k, members)
			if !slices.Contains(members, owners[i]) {
				t.Fatalf("n=%d: Owner(%q) = %q, not a member", n, k, owners[i])
			}
			// The owner is the member with the highest score.
			for _, m := range members {
				if m != owners[i] && sharding.Score(k, m) > sharding.Score(k, owners[i]) {
					t.Fatalf("n=%d: Owner(%q) = %q, but %q scores higher", n, k, owners[i], m)
				}
			}
		}
		for range 5 {
			shuffled := slices.Clone(members)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			for i, k := range keys {
				if got := sharding.Owner(k, shuffled); got != owners[i] {
					t.Fatalf("n=%d: Owner(%q) = %q with members %v, %q with members %v", n, k, owners[i], members, got, shuffled)
				}
			}
		}
		if !slices.Equal(members, podNames(n, uint64(n))) {
			t.Fatalf("n=%d: Owner changed its members slice", n)
		}
	}
}

func TestOwnerWhenAMemberLeaves(t *testing.T) {
	keys := controlPlaneKeys(2000, 3)
	for _, n := range memberCounts {
		members := podNames(n, uint64(100+n))
		owners := make([]string, len(keys))
		for i, k := range keys {
			owners[i] = sharding.Owner(k, members)
		}
		for li, leaver := range members {
			rest := slices.Delete(slices.Clone(members), li, li+1)
			moved := 0
			for i, k := range keys {
				got := sharding.Owner(k, rest)
				switch {
				case owners[i] == leaver:
					moved++
				case got != owners[i]:
					t.Fatalf("n=%d: %s left and %q moved from %s to %s", n, leaver, k, owners[i], got)
				}
			}
			if moved == 0 && n <= 20 {
				t.Errorf("n=%d: %s owned none of %d keys", n, leaver, len(keys))
			}
		}
	}
}

func TestOwnerWhenAMemberJoins(t *testing.T) {
	keys := controlPlaneKeys(2000, 4)
	for _, n := range memberCounts {
		pool := podNames(n+3, uint64(200+n))
		members := pool[:n]
		owners := make([]string, len(keys))
		for i, k := range keys {
			owners[i] = sharding.Owner(k, members)
		}
		for _, joiner := range pool[n:] {
			with := append(slices.Clone(members), joiner)
			moved := 0
			for i, k := range keys {
				if got := sharding.Owner(k, with); got != owners[i] {
					if got != joiner {
						t.Fatalf("n=%d: %s joined and %q moved from %s to %s", n, joiner, k, owners[i], got)
					}
					moved++
				}
			}
			if moved == 0 {
				t.Errorf("n=%d: %s joined and took none of %d keys", n, joiner, len(keys))
			}
		}
	}
}

// TestScoreIsStable pins a few scores: replicas of two versions run side by side during a
// rolling update and must agree on every owner, so a change of the hash is a breaking
// change (every replica must be replaced at once), never a refactoring. The values were
// computed independently of this package: FNV-1a 64 of key, a zero byte and member, then
// MurmurHash3's fmix64.
func TestScoreIsStable(t *testing.T) {
	for _, tc := range []struct {
		key, member string
		want        uint64
	}{
		{"project-a--ws-1/mcp-7", "sp-kro-7d9f8c6b5-x2k4q", 0xf32efc595c2191ff},
		{"project-a--ws-1/mcp-7", "replica-0", 0x0cd82cc704728bb8},
		{"tenants/cp-00001", "replica-1", 0x7115db4f9d6596a7},
	} {
		if got := sharding.Score(tc.key, tc.member); got != tc.want {
			t.Errorf("Score(%q, %q) = %#x, want %#x", tc.key, tc.member, got, tc.want)
		}
	}
}

// The simulation.

// simKeys is how many ControlPlanes the simulation assigns.
const simKeys = 10000

// tableCounts are the numbers of members in the report's table; the simulation covers 2 to 20.
var tableCounts = []int{2, 3, 4, 5, 6, 8, 10, 12, 16, 20}

// hashChoice is one way to score, with the tie rule of its implementation.
type hashChoice struct {
	name  string
	score func(key, member string) uint64
	// owner returns the index (into names) of the owner among the members idx.
	owner func(scores []uint64, names []string, idx []int) int
	// check returns the owner as the real implementation finds it.
	check func(key string, members []string) string
}

// ours is providers/sharding: the highest score wins, a tie goes to the greater name.
var ours = hashChoice{
	name:  "ours",
	score: sharding.Score,
	owner: func(scores []uint64, names []string, idx []int) int {
		best := -1
		for _, i := range idx {
			if best < 0 || scores[i] > scores[best] || (scores[i] == scores[best] && names[i] > names[best]) {
				best = i
			}
		}
		return best
	},
	check: sharding.Owner,
}

// mcr is multicluster-runtime's sharder.HRW with weight 1: FNV-1a of clusterID+"|"+peer
// ID, and "last wins" on a tie. Its score is computed here once per key and member (the
// sharder keeps it private); check asks ShouldOwn of every peer, which must agree.
var mcr = hashChoice{
	name: "mcr sharder.HRW",
	score: func(key, member string) uint64 {
		h := fnv.New64a()
		_, _ = h.Write([]byte(key + "|" + member))
		return h.Sum64()
	},
	owner: func(scores []uint64, _ []string, idx []int) int {
		best, bestScore := -1, uint64(0)
		for _, i := range idx {
			if scores[i] >= bestScore {
				best, bestScore = i, scores[i]
			}
		}
		return best
	},
	check: func(key string, members []string) string {
		peers := make([]sharder.PeerInfo, len(members))
		for i, m := range members {
			peers[i] = sharder.PeerInfo{ID: m}
		}
		owner := ""
		hrw := sharder.NewHRW()
		for _, p := range peers {
			if hrw.ShouldOwn(key, peers, p) {
				if owner != "" {
					return owner + " and " + p.ID
				}
				owner = p.ID
			}
		}
		return owner
	},
}

// scenario is a set of keys and a pool of member names. Members 0..n-1 are the n members;
// joiners(n) are the candidates that join them, one at a time; the newest member, n-1,
// is the one that leaves (a ReplicaSet scales down its newest pods first, a StatefulSet
// its highest ordinal).
type scenario struct {
	keysName, membersName string
	keys, pool            []string
	joiners               func(n int) []int
}

func scenarios() []scenario {
	cp := controlPlaneKeys(simKeys, 10)
	seq := sequentialKeys(simKeys)
	// 20 pods, and 10 fresh pods that might join them; the moved share on join is their mean.
	pods := podNames(30, 10)
	podJoiners := func(int) []int { return []int{20, 21, 22, 23, 24, 25, 26, 27, 28, 29} }
	// replica-0 to replica-20; replica-n joins n members.
	replicas := replicaNames(21)
	replicaJoiner := func(n int) []int { return []int{n} }
	// Markdown: in backquotes, or <hash> would be taken for an HTML tag.
	const cpName, seqName = "`project-<p>--ws-<w>/<name>`", "`tenants/cp-00001`…"
	const podName, replicaName = "`sp-kro-<hash>-<5 random>`", "`replica-0`…"
	return []scenario{
		{cpName, podName, cp, pods, podJoiners},
		{seqName, podName, seq, pods, podJoiners},
		{cpName, replicaName, cp, replicas, replicaJoiner},
		{seqName, replicaName, seq, replicas, replicaJoiner},
	}
}

// thousands formats 10000 as "10,000".
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// figures are one hash's results for n members.
type figures struct {
	n                int
	maxMean, minMean float64
	zero             int     // members without a key
	join             float64 // share of keys moved when a member joins, mean over the joiners
	leave            float64 // share of keys moved when the newest member leaves
}

// simulate assigns the scenario's keys to 2..20 members with the hash choice, and checks
// what holds for any rendezvous hashing: the assignment agrees with the real
// implementation, a joiner takes keys only for itself, and a leaver's keys are the only
// ones that move. It returns the first violation as an error.
func simulate(sc scenario, hc hashChoice) (map[int]figures, error) {
	scores := make([][]uint64, len(sc.keys))
	for k, key := range sc.keys {
		scores[k] = make([]uint64, len(sc.pool))
		for m, member := range sc.pool {
			scores[k][m] = hc.score(key, member)
		}
	}
	idx := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = i
		}
		return s
	}
	result := map[int]figures{}
	owners := make([]int, len(sc.keys))
	for n := 2; n <= 20; n++ {
		members := idx(n)
		counts := make([]int, n)
		for k := range sc.keys {
			owners[k] = hc.owner(scores[k], sc.pool, members)
			counts[owners[k]]++
		}
		if slices.Contains(tableCounts, n) {
			// The first keys, as the real implementation assigns them.
			for k, key := range sc.keys[:300] {
				if got, want := hc.check(key, sc.pool[:n]), sc.pool[owners[k]]; got != want {
					return nil, fmt.Errorf("%s, n=%d: %q is owned by %s, the simulation says %s", hc.name, n, key, got, want)
				}
			}
		}
		f := figures{n: n}
		mean := float64(len(sc.keys)) / float64(n)
		f.maxMean = float64(slices.Max(counts)) / mean
		f.minMean = float64(slices.Min(counts)) / mean
		for _, c := range counts {
			if c == 0 {
				f.zero++
			}
		}
		for _, j := range sc.joiners(n) {
			with := append(idx(n), j)
			moved := 0
			for k := range sc.keys {
				if o := hc.owner(scores[k], sc.pool, with); o != owners[k] {
					if o != j {
						return nil, fmt.Errorf("%s, n=%d: %s joined and %q moved from %s to %s", hc.name, n, sc.pool[j], sc.keys[k], sc.pool[owners[k]], sc.pool[o])
					}
					moved++
				}
			}
			f.join += float64(moved) / float64(len(sc.keys))
		}
		f.join /= float64(len(sc.joiners(n)))
		leaver := n - 1
		moved := 0
		for k := range sc.keys {
			if hc.owner(scores[k], sc.pool, members[:n-1]) != owners[k] {
				moved++
			}
		}
		if moved != counts[leaver] {
			return nil, fmt.Errorf("%s, n=%d: %s left and %d keys moved, it owned %d", hc.name, n, sc.pool[leaver], moved, counts[leaver])
		}
		f.leave = float64(moved) / float64(len(sc.keys))
		result[n] = f
	}
	return result, nil
}

// TestAssignmentSimulation assigns 10,000 ControlPlanes to 2 to 20 replicas, with our
// hash and with multicluster-runtime's sharder.HRW, and reports the balance and how many
// ControlPlanes move when a replica joins or leaves. The balance is recorded, not
// asserted (the target: every replica within ±15 % of the mean); asserted are the
// properties of rendezvous hashing and, for our hash only, bounds any decent hash keeps.
// With SHARDING_REPORT=<file> it writes the report as markdown (go tool task sharding-sim
// puts it into docs/measurements/scaling.md).
func TestAssignmentSimulation(t *testing.T) {
	type row struct {
		sc        scenario
		ours, mcr map[int]figures
	}
	// The eight simulations run side by side; the checks follow in the test's goroutine.
	scs := scenarios()
	rows := make([]row, len(scs))
	errs := make([]error, 2*len(scs))
	var wg sync.WaitGroup
	for i, sc := range scs {
		rows[i].sc = sc
		wg.Go(func() { rows[i].ours, errs[2*i] = simulate(sc, ours) })
		wg.Go(func() { rows[i].mcr, errs[2*i+1] = simulate(sc, mcr) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		sc := r.sc
		for n := 2; n <= 20; n++ {
			if f := r.ours[n]; f.zero > 0 || f.maxMean > 1.5 || f.minMean < 0.5 {
				t.Errorf("ours, keys %s, members %s, n=%d: %d members without a key, max/mean %.2f, min/mean %.2f",
					sc.keysName, sc.membersName, n, f.zero, f.maxMean, f.minMean)
			}
		}
	}
	if t.Failed() {
		return
	}

	// worst returns the worst balance over n = 2..20 and the n where each is found.
	worst := func(fs map[int]figures) (maxMean float64, maxN int, minMean float64, minN int, zero int) {
		minMean = 1
		for n := 2; n <= 20; n++ {
			f := fs[n]
			if f.maxMean > maxMean {
				maxMean, maxN = f.maxMean, n
			}
			if f.minMean < minMean {
				minMean, minN = f.minMean, n
			}
			zero = max(zero, f.zero)
		}
		return maxMean, maxN, minMean, minN, zero
	}
	pct := func(x float64) string { return fmt.Sprintf("%.1f %%", 100*x) }

	var md strings.Builder
	main := rows[0]
	fmt.Fprintf(&md, "Written by `go tool task sharding-sim` (`TestAssignmentSimulation` in [providers/sharding/assign_test.go](../../providers/sharding/assign_test.go)); "+
		"do not edit between the markers by hand, run it again. The names are generated from fixed seeds, so a run gives the same figures.\n\n")
	fmt.Fprintf(&md, "%s ControlPlanes named %s assigned to n replicas named %s, by our hash (`sharding.Owner`) and by "+
		"multicluster-runtime's `sharder.HRW` (FNV-1a without a finalizer). Balance is the most and the fewest ControlPlanes "+
		"of a replica over the mean; the target is within ±15 %% of it, i.e. max/mean ≤ 1.15 and min/mean ≥ 0.85. "+
		"\"Moved on join\" is the mean share of ControlPlanes that move when one of 10 fresh pods joins the n replicas, "+
		"\"moved on leave\" the share that moves when the newest of the n leaves (a ReplicaSet scales its newest pods down first); "+
		"the ideal is 1/(n+1) and 1/n.\n\n", thousands(simKeys), main.sc.keysName, main.sc.membersName)
	md.WriteString("| members | our HRW max/mean | min/mean | moved on join (ideal) | moved on leave (ideal) | mcr sharder.HRW max/mean | min/mean |\n")
	md.WriteString("|---|---|---|---|---|---|---|\n")
	for _, n := range tableCounts {
		o, m := main.ours[n], main.mcr[n]
		fmt.Fprintf(&md, "| %d | %.2f | %.2f | %s (%s) | %s (%s) | %.2f | %.2f |\n", n, o.maxMean, o.minMean,
			pct(o.join), pct(1/float64(n+1)), pct(o.leave), pct(1/float64(n)), m.maxMean, m.minMean)
	}
	md.WriteString("\nThe worst balance over n = 2 to 20 for every combination of ControlPlane and replica names " +
		"(with `replica-<i>`, as a StatefulSet names its pods, `replica-n` joins and the highest ordinal leaves):\n\n")
	md.WriteString("| ControlPlanes | replicas | our HRW worst max/mean | worst min/mean | mcr sharder.HRW worst max/mean | worst min/mean |\n")
	md.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range rows {
		oMax, oMaxN, oMin, oMinN, _ := worst(r.ours)
		mMax, mMaxN, mMin, mMinN, _ := worst(r.mcr)
		fmt.Fprintf(&md, "| %s | %s | %.2f (n=%d) | %.2f (n=%d) | %.2f (n=%d) | %.2f (n=%d) |\n",
			r.sc.keysName, r.sc.membersName, oMax, oMaxN, oMin, oMinN, mMax, mMaxN, mMin, mMinN)
	}

	if path := os.Getenv("SHARDING_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(md.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
		return
	}
	for _, r := range rows {
		oMax, _, oMin, _, _ := worst(r.ours)
		mMax, _, mMin, _, mZero := worst(r.mcr)
		t.Logf("%d keys %s, members %s, n=2..20: ours max/mean ≤ %.2f, min/mean ≥ %.2f; mcr max/mean ≤ %.2f, min/mean ≥ %.2f, %d without a key",
			simKeys, r.sc.keysName, r.sc.membersName, oMax, oMin, mMax, mMin, mZero)
	}
	for _, n := range tableCounts {
		o, m := main.ours[n], main.mcr[n]
		t.Logf("n=%2d: ours %.2f/%.2f join %s (%s) leave %s (%s); mcr %.2f/%.2f", n, o.maxMean, o.minMean,
			pct(o.join), pct(1/float64(n+1)), pct(o.leave), pct(1/float64(n)), m.maxMean, m.minMean)
	}
}
