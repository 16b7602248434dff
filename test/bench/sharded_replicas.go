package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// The provider replicas of the sharded run: started each behind its own proxy to the
// platform API server, waited for, restarted and stopped; their metrics scraped, their
// requests at rest counted, and their Lease renewals watched.

// startReplicas starts every replica, each behind its own proxy to the platform API
// server, and waits until each is ready (its readiness includes having joined).
func (s *shardHarness) startReplicas(ctx context.Context) error {
	for i := range s.sc.Replicas {
		id := fmt.Sprintf("replica-%d", i+1)
		p, err := testenv.StartProxy(s.platform.Config)
		if err != nil {
			return err
		}
		host := p.Config(s.platform.Config).Host
		kc, err := clientcmd.Load(s.platform.Kubeconfig)
		if err != nil {
			return err
		}
		for _, c := range kc.Clusters {
			c.Server = host
		}
		path := filepath.Join(s.cfg.WorkDir, "platform-"+id+".kubeconfig")
		if err := clientcmd.WriteToFile(*kc, path); err != nil {
			return err
		}
		addrs, err := testenv.FreeLoopbackAddrs(2)
		if err != nil {
			return err
		}
		r := &replica{id: id, metrics: "http://" + addrs[0] + "/metrics", health: "http://" + addrs[1] + "/readyz", proxy: p,
			plHost: strings.TrimPrefix(host, "https://")}
		r.args = append([]string{"run",
			"--onboarding-kubeconfig", s.obKube, "--platform-kubeconfig", path, "--pod-namespace", podNamespace,
			"--metrics-bind-address", addrs[0], "--metrics-secure=false", "--health-probe-bind-address", addrs[1],
			"--sharding", "--shard-id=" + id, "--shard-lease-duration=" + s.sc.LeaseDuration.String(),
			"--zap-time-encoding=rfc3339nano"}, s.cfg.ProviderFlags...)
		if r.proc, err = testenv.StartProcess("provider-"+id, s.cfg.WorkDir, []string{"HOME=" + s.cfg.WorkDir}, s.bin, r.args...); err != nil {
			return err
		}
		r.up = true
		s.reps = append(s.reps, r)
	}
	for _, r := range s.reps {
		if err := s.waitReady(ctx, r); err != nil {
			return err
		}
	}
	s.logf("sharded: %d replicas ready", len(s.reps))
	return nil
}

func (s *shardHarness) waitReady(ctx context.Context, r *replica) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if resp, err := s.httpc.Get(r.health); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-r.proc.Exited():
			return fmt.Errorf("%s exited: %w\n%s", r.id, r.proc.ExitError(), r.proc.LogTail(30))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not become ready:\n%s", r.id, r.proc.LogTail(30))
}

func (s *shardHarness) restartReplica(r *replica) error {
	p, err := r.proc.Restart()
	if err != nil {
		return err
	}
	r.proc, r.up = p, true
	return nil
}

func (s *shardHarness) stopReplicas() {
	var wg sync.WaitGroup
	for _, r := range s.reps {
		if r.up {
			r.up = false
			wg.Go(func() { _ = r.proc.Stop() })
		}
	}
	wg.Wait()
}

func (s *shardHarness) stopAll() {
	s.stopReplicas()
	for _, r := range s.reps {
		_ = r.proxy.Close()
	}
	s.stop()
}

// unexpectedExits names replicas that ended while the harness counted them up.
func (s *shardHarness) unexpectedExits() []string {
	var out []string
	for _, r := range s.reps {
		if !r.up {
			continue
		}
		select {
		case <-r.proc.Exited():
			out = append(out, fmt.Sprintf("%s: %v", r.id, r.proc.ExitError()))
		default:
		}
	}
	return out
}

// repState is one scrape of a replica's metrics.
type repState struct {
	members, owned, engaged, depth float64
	requests, platform             map[string]float64
}

func (s *shardHarness) scrape(r *replica) (repState, error) {
	resp, err := s.httpc.Get(r.metrics)
	if err != nil {
		return repState{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return repState{}, err
	}
	m := ParseProm(string(b))
	return repState{
		members: Sum(m, "service_provider_kro_shard_members", nil),
		owned:   Sum(m, "service_provider_kro_shard_owned_controlplanes", nil),
		engaged: Sum(m, "service_provider_kro_controlplanes", func(l map[string]string) bool { return l["phase"] == "Engaged" }),
		depth:   Sum(m, "workqueue_depth", func(l map[string]string) bool { return l["name"] == "kro" }),
		requests: SumBy(m, "rest_client_requests_total", func(l map[string]string) (string, bool) {
			return l["method"], true
		}),
		platform: SumBy(m, "rest_client_requests_total", func(l map[string]string) (string, bool) {
			return l["method"], l["host"] == r.plHost
		}),
	}, nil
}

func (s *shardHarness) rep(id string) *replica {
	for _, r := range s.reps {
		if r.id == id {
			return r
		}
	}
	return nil
}

// idleCost measures every replica's requests to the platform API server at rest.
func (s *shardHarness) idleCost(ctx context.Context) (ShardIdle, error) {
	window := max(s.cfg.IdleWindow, 5*time.Second)
	s.logf("sharded: idle for %s", window)
	before := map[string]repState{}
	for _, r := range s.reps {
		st, err := s.scrape(r)
		if err != nil {
			return ShardIdle{}, err
		}
		before[r.id] = st
	}
	apiBefore, err := s.leaseRequests(ctx)
	if err != nil {
		return ShardIdle{}, err
	}
	start := time.Now()
	if err := sleep(ctx, window); err != nil {
		return ShardIdle{}, err
	}
	out := ShardIdle{PlatformRequestsPerSecond: map[string]float64{}, PlatformRequestsByMethod: map[string]map[string]float64{},
		LeaseRenewalsPerSecond: map[string]float64{}, APIServerLeaseRequestsPerSecond: map[string]float64{}}
	for _, r := range s.reps {
		st, err := s.scrape(r)
		if err != nil {
			return ShardIdle{}, err
		}
		d := Delta(before[r.id].platform, st.platform)
		out.PlatformRequestsByMethod[r.id] = d
		out.PlatformRequestsPerSecond[r.id] = round3(total(d) / time.Since(start).Seconds())
		out.LeaseRenewalsPerSecond[r.id] = round3(d["PUT"] / time.Since(start).Seconds())
	}
	apiAfter, err := s.leaseRequests(ctx)
	if err != nil {
		return ShardIdle{}, err
	}
	secs := time.Since(start).Seconds()
	for k, v := range Delta(apiBefore, apiAfter) {
		out.APIServerLeaseRequestsPerSecond[k] = round3(v / secs)
	}
	out.WindowSeconds = round(secs)
	return out, nil
}

// leaseRequests are the platform API server's requests for leases, by verb.
func (s *shardHarness) leaseRequests(ctx context.Context) (map[string]float64, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(s.platform.Config)
	if err != nil {
		return nil, err
	}
	raw, err := dc.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scraping the platform API server: %w", err)
	}
	return SumBy(ParseProm(string(raw)), "apiserver_request_total", func(l map[string]string) (string, bool) {
		return l["verb"], l["resource"] == "leases"
	}), nil
}

// upMembers are the replicas running and not cut off.
func (s *shardHarness) upMembers() []string {
	var out []string
	for _, r := range s.reps {
		if r.up {
			out = append(out, r.id)
		}
	}
	return out
}

// waitRenewal returns as soon as replica's Lease has been renewed.
func (s *shardHarness) waitRenewal(ctx context.Context, replica string) error {
	key := client.ObjectKey{Namespace: podNamespace, Name: "service-provider-" + providerName + "-" + replica}
	l := &coordinationv1.Lease{}
	if err := s.leases.Get(ctx, key, l); err != nil {
		return err
	}
	rv := l.ResourceVersion
	deadline := time.Now().Add(2 * s.sc.LeaseDuration)
	for time.Now().Before(deadline) {
		if err := s.leases.Get(ctx, key, l); err != nil {
			return err
		}
		if l.ResourceVersion != rv {
			return nil
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("the Lease of %s was not renewed in %s", replica, 2*s.sc.LeaseDuration)
}
