package sharding_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/providers/sharding"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

const ns = "provider-system"

var (
	platform *testenv.Cluster
	groupA   = map[string]string{"test.sharding/group": "a"}
)

// The API server starts with the first test that needs it, so that the pure tests of the
// package (assign_test.go) run without one.
var platformOnce struct {
	sync.Once
	err error
}

func withPlatform(t *testing.T) {
	t.Helper()
	platformOnce.Do(func() {
		ctx := context.Background()
		cs, err := testenv.StartClusters(ctx, testenv.ClusterOptions{Name: "platform"})
		if err != nil {
			platformOnce.err = err
			return
		}
		platform = cs[0]
		platformOnce.err = platform.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	if platformOnce.err != nil {
		t.Fatalf("starting the platform cluster: %v", platformOnce.err)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if platform != nil {
		testenv.StopClusters(platform)
	}
	os.Exit(code)
}

// member is one running Membership and what its subscriber was told.
type member struct {
	*sharding.Membership
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	told [][]string
}

func (m *member) stop() {
	m.cancel()
	<-m.done
}

func (m *member) lastTold() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.told) == 0 {
		return nil
	}
	return m.told[len(m.told)-1]
}

func start(t *testing.T, cfg *rest.Config, id string, labels map[string]string, d time.Duration) *member {
	t.Helper()
	ms, err := sharding.New(cfg, sharding.Options{
		Namespace: ns, Identity: id, Labels: labels, LeaseDuration: d,
		Log: testr.New(t).WithName(id),
	})
	if err != nil {
		t.Fatal(err)
	}
	m := &member{Membership: ms, done: make(chan struct{})}
	ms.Subscribe(func(_, after []string) {
		m.mu.Lock()
		m.told = append(m.told, after)
		m.mu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() {
		defer close(m.done)
		if err := ms.Start(ctx); err != nil {
			t.Errorf("membership %s: %v", id, err)
		}
	}()
	t.Cleanup(func() { cancel(); <-m.done })
	return m
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("tenant-%d/cp-%d", i%17, i)
	}
	return out
}

// owners counts, for every key, how many of the members claim it.
func owners(ms []*member, ks []string) map[int]int {
	hist := map[int]int{}
	for _, k := range ks {
		n := 0
		for _, m := range ms {
			if m.Owns(k) {
				n++
			}
		}
		hist[n]++
	}
	return hist
}

func TestMembersShareEveryKeyExactlyOnce(t *testing.T) {
	withPlatform(t)
	g := NewWithT(t)
	ms := []*member{
		start(t, platform.Config, "replica-a", groupA, 6*time.Second),
		start(t, platform.Config, "replica-b", groupA, 6*time.Second),
		start(t, platform.Config, "replica-c", groupA, 6*time.Second),
	}
	all := []string{"replica-a", "replica-b", "replica-c"}
	for _, m := range ms {
		g.Eventually(m.Members).WithTimeout(20 * time.Second).Should(Equal(all))
		g.Eventually(m.lastTold).Should(Equal(all), "subscribers are told the members")
	}
	ks := keys(600)
	g.Expect(owners(ms, ks)).To(Equal(map[int]int{1: len(ks)}), "each key has exactly one owner")

	// A subscriber that comes late is told the current view at once.
	var late []string
	ms[1].Subscribe(func(_, after []string) { late = after })
	g.Expect(late).To(Equal(all))
	for _, m := range ms {
		n := 0
		for _, k := range ks {
			if m.Owns(k) {
				n++
			}
		}
		g.Expect(n).To(BeNumerically(">", 100), "%s owns a share", m.Identity())
	}

	// Idle, a member renews its Lease every third of the duration and nothing else
	// changes: the subscribers are told nothing new.
	before := len(ms[0].told)
	g.Consistently(func() int { ms[0].mu.Lock(); defer ms[0].mu.Unlock(); return len(ms[0].told) }).
		WithTimeout(7 * time.Second).Should(Equal(before))
}

func TestAStoppingMemberHandsOverAtOnce(t *testing.T) {
	withPlatform(t)
	g := NewWithT(t)
	// A long Lease: only the hand-over on stop can make the others see the change soon.
	a := start(t, platform.Config, "stop-a", map[string]string{"test.sharding/group": "stop"}, time.Minute)
	b := start(t, platform.Config, "stop-b", map[string]string{"test.sharding/group": "stop"}, time.Minute)
	g.Eventually(b.Members).WithTimeout(20 * time.Second).Should(Equal([]string{"stop-a", "stop-b"}))
	g.Eventually(a.Members).WithTimeout(20 * time.Second).Should(Equal([]string{"stop-a", "stop-b"}))

	a.stop()
	g.Expect(a.Members()).To(BeEmpty(), "a stopped member owns nothing")
	g.Expect(a.lastTold()).To(BeEmpty(), "its subscribers were told so before it stopped")
	err := platform.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "stop-a"}, &coordinationv1.Lease{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "its Lease is gone: %v", err)
	g.Eventually(b.Members).WithTimeout(5 * time.Second).Should(Equal([]string{"stop-b"}))
	g.Expect(owners([]*member{a, b}, keys(200))).To(Equal(map[int]int{1: 200}), "the other owns all")
}

func TestAMemberThatStopsRenewingIsDroppedWhenItsLeaseExpires(t *testing.T) {
	withPlatform(t)
	g := NewWithT(t)
	labels := map[string]string{"test.sharding/group": "expiry"}
	// A Lease that nobody renews: a replica that was killed.
	now := metav1.NewMicroTime(time.Now())
	ghost := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ghost", Labels: labels},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("ghost"), LeaseDurationSeconds: ptr.To(int32(4)), RenewTime: &now},
	}
	g.Expect(platform.Client.Create(context.Background(), ghost)).To(Succeed())
	a := start(t, platform.Config, "alive", labels, 6*time.Second)
	g.Eventually(a.Members).WithTimeout(10 * time.Second).Should(Equal([]string{"alive", "ghost"}))
	// It counts from when it saw the Lease, not from the renewTime in it.
	g.Eventually(a.Members).WithTimeout(10 * time.Second).Should(Equal([]string{"alive"}))
	g.Expect(owners([]*member{a}, keys(100))).To(Equal(map[int]int{1: 100}))
}

// TestAPartitionedMemberStepsBackBeforeTheOthersTakeOver cuts a member off the API
// server, once at any moment, and once right after it renewed its Lease: then its own
// Lease is newer than the others' it saw last, and they run out first in its view. It
// must not take their keys for that: cut off, it cannot tell them gone from itself cut off.
func TestAPartitionedMemberStepsBackBeforeTheOthersTakeOver(t *testing.T) {
	withPlatform(t)
	t.Run("at any moment", func(t *testing.T) { partitionMember(t, "any", false) })
	t.Run("right after it renewed", func(t *testing.T) { partitionMember(t, "renewed", true) })
}

func partitionMember(t *testing.T, group string, afterRenewal bool) {
	g := NewWithT(t)
	labels := map[string]string{"test.sharding/group": "partition-" + group}
	cutID, otherID := "cut-off-"+group, "other-"+group
	proxy, err := testenv.StartProxy(platform.Config)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = proxy.Close() }()
	const d = 6 * time.Second
	cut := start(t, proxy.Config(platform.Config), cutID, labels, d)
	// Half a renewal period later, so that the other's renewals fall between the cut
	// member's: the cut after a renewal then leaves the other's Lease older than its own.
	time.Sleep(d / 6)
	other := start(t, platform.Config, otherID, labels, d)
	both := []string{cutID, otherID}
	g.Eventually(cut.Members).WithTimeout(20 * time.Second).Should(Equal(both))
	g.Eventually(other.Members).WithTimeout(20 * time.Second).Should(Equal(both))

	// Record, every 50 ms, whether both claim the same key, and when each changed its view.
	ks := keys(300)
	var doubled, orphaned time.Duration
	var cutLeft, otherTookOver time.Time
	if afterRenewal {
		lease := &coordinationv1.Lease{}
		key := client.ObjectKey{Namespace: ns, Name: cutID}
		g.Expect(platform.Client.Get(context.Background(), key, lease)).To(Succeed())
		rv := lease.ResourceVersion
		g.Eventually(func() string {
			_ = platform.Client.Get(context.Background(), key, lease)
			return lease.ResourceVersion
		}).WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).ShouldNot(Equal(rv))
	}
	proxy.Cut()
	cutAt := time.Now()
	for time.Since(cutAt) < 2*d {
		h := owners([]*member{cut, other}, ks)
		if h[2] > 0 {
			doubled += 50 * time.Millisecond
		}
		if h[0] > 0 {
			orphaned += 50 * time.Millisecond
		}
		if cutLeft.IsZero() && len(cut.Members()) == 0 {
			cutLeft = time.Now()
		}
		if otherTookOver.IsZero() && slices.Equal(other.Members(), []string{otherID}) {
			otherTookOver = time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	g.Expect(cutLeft).NotTo(BeZero(), "the partitioned member stepped back")
	g.Expect(otherTookOver).NotTo(BeZero(), "the other took over")
	g.Expect(cutLeft.Before(otherTookOver)).To(BeTrue(), "it stepped back (%s) before the other took over (%s)",
		cutLeft.Sub(cutAt), otherTookOver.Sub(cutAt))
	g.Expect(doubled).To(BeZero(), "no key had two owners")
	t.Logf("partition: stepped back after %s, taken over after %s, keys without owner for %s",
		cutLeft.Sub(cutAt), otherTookOver.Sub(cutAt), orphaned)

	// Healed, it joins again once its Lease is back.
	proxy.Heal()
	g.Eventually(cut.Members).WithTimeout(30 * time.Second).Should(Equal(both))
	g.Eventually(other.Members).WithTimeout(30 * time.Second).Should(Equal(both))
	g.Eventually(func() map[int]int { return owners([]*member{cut, other}, ks) }).Should(Equal(map[int]int{1: len(ks)}))
}

func TestAJoiningMemberClaimsNothingBeforeItHasSeenItsLease(t *testing.T) {
	withPlatform(t)
	g := NewWithT(t)
	ms, err := sharding.New(platform.Config, sharding.Options{Namespace: ns, Identity: "late", Labels: map[string]string{"test.sharding/group": "join"}, Log: logr.Discard()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ms.Joined()).To(BeFalse())
	g.Expect(ms.Owns("any/key")).To(BeFalse(), "not started: owns nothing")
	_, err = sharding.New(platform.Config, sharding.Options{Namespace: ns, Identity: "x"})
	g.Expect(err).To(MatchError(ContainSubstring("labels")), "Leases without labels would mix providers")
}
