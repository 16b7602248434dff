package testenv

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/hack/image/ociimage"
)

// KubeControllerManagerOptions configures StartKubeControllerManager.
type KubeControllerManagerOptions struct {
	// Kubeconfig is a self-contained admin kubeconfig of the cluster.
	Kubeconfig []byte
	// Dir holds the kubeconfig and the log.
	Dir string
	// Controllers to run; default the Deployment, ReplicaSet, Job, namespace and garbage
	// collector controllers.
	Controllers []string
}

// StartKubeControllerManager runs kube-controller-manager against a bare API server (such
// as an envtest cluster), so that Jobs and Deployments get pods (a Kubelet then runs them),
// deleted namespaces are emptied and removed, and owned objects are garbage collected. It serves nothing (no secure port) and does no
// leader election.
func StartKubeControllerManager(ctx context.Context, log io.Writer, opts KubeControllerManagerOptions) (*Process, error) {
	bin, err := KubeControllerManager.Path(ctx, log)
	if err != nil {
		return nil, err
	}
	if len(opts.Controllers) == 0 {
		opts.Controllers = []string{"deployment-controller", "replicaset-controller", "job-controller",
			"namespace-controller", "garbage-collector-controller"}
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(opts.Dir, "kube-controller-manager.kubeconfig")
	if err := os.WriteFile(kubeconfig, opts.Kubeconfig, 0o600); err != nil {
		return nil, err
	}
	p, err := StartProcess("kube-controller-manager", opts.Dir, nil, bin,
		"--kubeconfig="+kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers="+strings.Join(opts.Controllers, ","),
		"--concurrent-deployment-syncs=2", "--concurrent-replicaset-syncs=2", "--concurrent-job-syncs=2",
	)
	if err != nil {
		return nil, err
	}
	select { // it fails fast on bad flags
	case <-p.Exited():
		return nil, fmt.Errorf("kube-controller-manager exited: %w\n%s", p.err, p.LogTail(20))
	case <-time.After(time.Second):
	}
	return p, nil
}

// KubeletOptions configures StartKubelet.
type KubeletOptions struct {
	// Platform is the cluster whose pods the kubelet runs (admin credentials).
	Platform *rest.Config
	// NodeName is the node it registers; default "testenv-kubelet".
	NodeName string
	// Dir holds the pods' files (kubeconfig, working folder), their logs
	// (<namespace>_<pod>.log) and the images' binaries.
	Dir string
	// RegistryCAs are the CAs the kubelet trusts for pulling images, besides none.
	RegistryCAs *x509.CertPool
	// Log receives a line per pod event.
	Log io.Writer
}

// Kubelet plays the kubelet of one node of a cluster whose pods are real processes: it
// registers the node, binds every pending pod to it (there is no scheduler), and runs each
// pod's single container as a local process exactly as the pod says: the image is pulled
// from its registry with the pod's imagePullSecrets, the binary is taken from the image's
// layers, the command line is the image's ENTRYPOINT/CMD merged with the container's command
// and args as Kubernetes does, the environment is the image's plus the container's (values,
// $(VAR) references, fieldRefs, secret and config map keys, envFrom), and the process gets a
// credential of the pod's ServiceAccount: a TokenRequest token bound to the pod, in a
// kubeconfig named by $KUBECONFIG (instead of the in-cluster files, which a process on this
// machine cannot have at their fixed path). Volumes are not mounted. The pod's IP is
// 127.0.0.1: every pod shares the machine's network.
//
// The pod's status follows the process: Running and Ready once it is started; when it
// exits, Succeeded or Failed by its exit code for restartPolicy Never, else it is restarted
// with a back-off (CrashLoopBackOff) and its restartCount grows. A pod being deleted has its
// process stopped (SIGTERM, then SIGKILL after the grace period, at most 10 s) and is then
// removed; a pod that vanishes has its process killed.
type Kubelet struct {
	opts   KubeletOptions
	c      client.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	pods   map[types.UID]*podRun
	images map[string]*pulledImage
}

type pulledImage struct {
	digest string
	config ociimage.RunConfig
	img    v1.Image
	files  map[string]string // path in image -> extracted file
}

type podRun struct {
	key    client.ObjectKey
	uid    types.UID
	cancel context.CancelFunc
	done   chan struct{}
}

// StartKubelet registers the node and starts running pods. Stop it with Stop, which kills
// every pod's process.
func StartKubelet(ctx context.Context, opts KubeletOptions) (*Kubelet, error) {
	if opts.NodeName == "" {
		opts.NodeName = "testenv-kubelet"
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	opts.Dir = dir
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o755); err != nil {
		return nil, err
	}
	c, err := client.New(opts.Platform, client.Options{Scheme: OpenMCPScheme})
	if err != nil {
		return nil, err
	}
	k := &Kubelet{opts: opts, c: c, pods: map[types.UID]*podRun{}, images: map[string]*pulledImage{}}
	if err := k.registerNode(ctx); err != nil {
		return nil, fmt.Errorf("registering node %s: %w", opts.NodeName, err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k.cancel, k.done = cancel, make(chan struct{})
	go k.loop(runCtx)
	return k, nil
}

// Stop stops the kubelet and kills every pod's process.
func (k *Kubelet) Stop() error {
	if k == nil || k.cancel == nil {
		return nil
	}
	k.cancel()
	<-k.done
	k.mu.Lock()
	runs := make([]*podRun, 0, len(k.pods))
	for _, r := range k.pods {
		runs = append(runs, r)
	}
	k.mu.Unlock()
	for _, r := range runs {
		r.cancel()
		<-r.done
	}
	return nil
}

// PodLogPath is the file that holds the output of a pod's container.
func (k *Kubelet) PodLogPath(namespace, name string) string {
	return filepath.Join(k.opts.Dir, namespace+"_"+name+".log")
}

func (k *Kubelet) registerNode(ctx context.Context) error {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.opts.NodeName, Labels: map[string]string{
		"kubernetes.io/hostname": k.opts.NodeName, "kubernetes.io/os": runtime.GOOS, "kubernetes.io/arch": runtime.GOARCH,
	}}}
	if err := k.c.Create(ctx, node); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	if err := k.c.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
		return err
	}
	now := metav1.Now()
	node.Status.Capacity, node.Status.Allocatable = capacity, capacity
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: k.opts.NodeName}}
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "testenv kubelet runs pods as processes",
		LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	node.Status.NodeInfo = corev1.NodeSystemInfo{OperatingSystem: runtime.GOOS, Architecture: runtime.GOARCH, KubeletVersion: KubernetesVersion, ContainerRuntimeVersion: "testenv://processes"}
	return k.c.Status().Update(ctx, node)
}

func (k *Kubelet) loop(ctx context.Context) {
	defer close(k.done)
	last := ""
	for {
		err := k.sync(ctx)
		if err != nil && ctx.Err() == nil && err.Error() != last {
			fmt.Fprintf(k.opts.Log, "kubelet: %v\n", err)
		}
		last = ""
		if err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (k *Kubelet) sync(ctx context.Context) error {
	var list corev1.PodList
	if err := k.c.List(ctx, &list); err != nil {
		return err
	}
	seen := map[types.UID]bool{}
	var errs []error
	for i := range list.Items {
		pod := &list.Items[i]
		seen[pod.UID] = true
		if err := k.syncPod(ctx, pod); err != nil {
			errs = append(errs, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err))
		}
	}
	k.mu.Lock()
	for uid, r := range k.pods {
		if !seen[uid] {
			r.cancel() // the pod is gone: kill its process
			select {
			case <-r.done:
				delete(k.pods, uid)
			default:
			}
		}
	}
	k.mu.Unlock()
	return errors.Join(errs...)
}

// syncPod binds a pending pod, starts the process of a pod of this node, and finishes the
// deletion of a deleted one once its process is gone.
func (k *Kubelet) syncPod(ctx context.Context, pod *corev1.Pod) error {
	switch {
	case pod.Spec.NodeName == "" && pod.DeletionTimestamp.IsZero() &&
		(pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == corev1.DefaultSchedulerName):
		binding := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: k.opts.NodeName},
		}
		if err := k.c.SubResource("binding").Create(ctx, pod, binding); err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("binding: %w", err)
		}
	case pod.Spec.NodeName != k.opts.NodeName:
	case !pod.DeletionTimestamp.IsZero():
		k.mu.Lock()
		r := k.pods[pod.UID]
		k.mu.Unlock()
		if r != nil {
			select {
			case <-r.done:
			default:
				r.cancel()
				return nil // removed once the process is gone
			}
		}
		// The kubelet's final delete: the pod's containers are gone.
		err := k.c.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
		if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return err
		}
	default:
		k.mu.Lock()
		defer k.mu.Unlock()
		if _, running := k.pods[pod.UID]; !running && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			runCtx, cancel := context.WithCancel(ctx)
			r := &podRun{key: client.ObjectKeyFromObject(pod), uid: pod.UID, cancel: cancel, done: make(chan struct{})}
			k.pods[pod.UID] = r
			go k.run(runCtx, r, pod.DeepCopy())
		}
	}
	return nil
}

// run starts the pod's container, restarts it as its restartPolicy says and reports its
// status, until the pod is done or ctx is cancelled (the pod is deleted).
func (k *Kubelet) run(ctx context.Context, r *podRun, pod *corev1.Pod) {
	defer close(r.done)
	logf := func(format string, args ...any) {
		fmt.Fprintf(k.opts.Log, "kubelet: pod %s/%s: %s\n", pod.Namespace, pod.Name, fmt.Sprintf(format, args...))
	}
	if len(pod.Spec.Containers) != 1 || len(pod.Spec.InitContainers) > 0 {
		logf("has %d containers and %d init containers; only pods with one container are supported", len(pod.Spec.Containers), len(pod.Spec.InitContainers))
		k.setStatus(ctx, pod, func(s *corev1.PodStatus) {
			waiting(s, pod, "CreateContainerConfigError", "testenv kubelet runs one container per pod")
		})
		<-ctx.Done()
		return
	}
	ctr := pod.Spec.Containers[0]
	startTime := metav1.Now()
	restarts := int32(0)
	var last *corev1.ContainerStateTerminated
	backoff := time.Second
	for {
		proc, image, err := k.start(ctx, pod, &ctr)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			logf("cannot start its container: %v", err)
			k.setStatus(ctx, pod, func(s *corev1.PodStatus) {
				waiting(s, pod, "CreateContainerError", err.Error())
				s.StartTime = &startTime
			})
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		started := metav1.Now()
		logf("started %s (pid %d): %s", image.digest, proc.Process.Pid, strings.Join(proc.Args, " "))
		k.setStatus(ctx, pod, func(s *corev1.PodStatus) {
			s.Phase = corev1.PodRunning
			s.StartTime = &startTime
			setConditions(s, true)
			s.ContainerStatuses = []corev1.ContainerStatus{{
				Name: ctr.Name, Image: ctr.Image, ImageID: image.digest, ContainerID: fmt.Sprintf("testenv://%d", proc.Process.Pid),
				Ready: true, Started: ptr.To(true), RestartCount: restarts,
				State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
				LastTerminationState: lastState(last),
			}}
		})
		code, stopped := waitOrStop(ctx, proc, pod)
		if stopped {
			logf("stopped")
			return
		}
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		last = &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: reason, StartedAt: started, FinishedAt: metav1.Now(),
			ContainerID: fmt.Sprintf("testenv://%d", proc.Process.Pid)}
		logf("exited with code %d", code)
		if phase, done := finalPhase(pod.Spec.RestartPolicy, code); done {
			k.setStatus(ctx, pod, func(s *corev1.PodStatus) {
				s.Phase = phase
				s.StartTime = &startTime
				setConditions(s, false)
				s.ContainerStatuses = []corev1.ContainerStatus{{
					Name: ctr.Name, Image: ctr.Image, ImageID: image.digest, ContainerID: last.ContainerID,
					Started: ptr.To(false), RestartCount: restarts, State: corev1.ContainerState{Terminated: last},
				}}
			})
			<-ctx.Done()
			return
		}
		restarts++
		k.setStatus(ctx, pod, func(s *corev1.PodStatus) {
			s.Phase = corev1.PodRunning
			setConditions(s, false)
			s.ContainerStatuses = []corev1.ContainerStatus{{
				Name: ctr.Name, Image: ctr.Image, ImageID: image.digest, Started: ptr.To(false), RestartCount: restarts,
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: fmt.Sprintf("back-off %s restarting failed container", backoff)}},
				LastTerminationState: lastState(last),
			}}
		})
		if !sleepCtx(ctx, backoff) {
			return
		}
		backoff = nextBackoff(backoff, started.Time)
	}
}

// waitOrStop waits for the container's process to exit and returns its exit code, or,
// when ctx is cancelled (the pod is deleted), stops it as the kubelet does: SIGTERM, and
// SIGKILL after the pod's grace period (at most 10 s).
func waitOrStop(ctx context.Context, proc *exec.Cmd, pod *corev1.Pod) (code int, stopped bool) {
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()
	select {
	case err := <-exited:
		return exitCode(err), false
	case <-ctx.Done():
	}
	grace := 10 * time.Second
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil && time.Duration(*g)*time.Second < grace {
		grace = time.Duration(*g) * time.Second
	}
	_ = syscall.Kill(-proc.Process.Pid, syscall.SIGTERM)
	select {
	case err := <-exited:
		return exitCode(err), true
	case <-time.After(grace):
	}
	_ = syscall.Kill(-proc.Process.Pid, syscall.SIGKILL)
	return exitCode(<-exited), true
}

// exitCode is a process's exit code as a container runtime reports it: 128+signal when a
// signal ended it.
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	default:
		return 128
	}
}

// finalPhase tells whether a container that exited with code is done for good under the
// restart policy, and the pod's phase then.
func finalPhase(policy corev1.RestartPolicy, code int) (corev1.PodPhase, bool) {
	if policy != corev1.RestartPolicyNever && (policy != corev1.RestartPolicyOnFailure || code != 0) {
		return "", false
	}
	if code != 0 {
		return corev1.PodFailed, true
	}
	return corev1.PodSucceeded, true
}

// nextBackoff doubles the restart back-off up to 10 s; a container that ran for a minute
// starts over at 1 s.
func nextBackoff(backoff time.Duration, started time.Time) time.Duration {
	if time.Since(started) > time.Minute {
		return time.Second
	}
	return min(2*backoff, 10*time.Second)
}

// start pulls the image, prepares the credential and starts the container's process.
func (k *Kubelet) start(ctx context.Context, pod *corev1.Pod, ctr *corev1.Container) (*exec.Cmd, *pulledImage, error) {
	image, err := k.pull(ctx, pod, ctr.Image)
	if err != nil {
		return nil, nil, fmt.Errorf("pulling %s: %w", ctr.Image, err)
	}
	argv := image.config.Argv(ctr.Command, ctr.Args)
	if len(argv) == 0 {
		return nil, nil, fmt.Errorf("neither the image nor the container says what to run")
	}
	bin, err := k.extract(image, argv[0])
	if err != nil {
		return nil, nil, err
	}
	podDir := filepath.Join(k.opts.Dir, "pods", pod.Namespace+"_"+pod.Name)
	if err := os.MkdirAll(filepath.Join(podDir, "tmp"), 0o755); err != nil {
		return nil, nil, err
	}
	kubeconfig, err := k.serviceAccountKubeconfig(ctx, pod)
	if err != nil {
		return nil, nil, err
	}
	kubeconfigPath := filepath.Join(podDir, "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		return nil, nil, err
	}
	env, err := k.environment(ctx, pod, ctr, image.config.Env)
	if err != nil {
		return nil, nil, err
	}
	env = append(env, "KUBECONFIG="+kubeconfigPath, "HOME="+podDir, "TMPDIR="+filepath.Join(podDir, "tmp"))
	logFile, err := os.OpenFile(k.PodLogPath(pod.Namespace, pod.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	defer logFile.Close() // the child has its own descriptor
	fmt.Fprintf(logFile, "=== testenv kubelet: %s %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	cmd := exec.Command(bin, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = env
	cmd.Dir = podDir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return cmd, image, nil
}

// pull fetches the image for this machine's platform (once per reference, as with
// imagePullPolicy IfNotPresent) with the credentials of the pod's imagePullSecrets.
func (k *Kubelet) pull(ctx context.Context, pod *corev1.Pod, ref string) (*pulledImage, error) {
	k.mu.Lock()
	cached := k.images[ref]
	k.mu.Unlock()
	if cached != nil {
		return cached, nil
	}
	parsed, err := name.ParseReference(ref)
	if err != nil {
		return nil, err
	}
	opts := ociimage.RegistryOptions{RootCAs: k.opts.RegistryCAs}
	for _, ps := range pod.Spec.ImagePullSecrets {
		secret := &corev1.Secret{}
		if err := k.c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: ps.Name}, secret); err != nil {
			continue // as the kubelet does: a missing pull secret is skipped
		}
		if user, pass, ok := dockerCredentials(secret.Data[corev1.DockerConfigJsonKey], parsed.Context().RegistryStr()); ok {
			opts.Username, opts.Password = user, pass
			break
		}
	}
	img, err := ociimage.Pull(ctx, ref, v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}, opts)
	if err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	cfg, err := ociimage.ReadRunConfig(img)
	if err != nil {
		return nil, err
	}
	p := &pulledImage{digest: parsed.Context().Name() + "@" + digest.String(), config: cfg, img: img, files: map[string]string{}}
	k.mu.Lock()
	k.images[ref] = p
	k.mu.Unlock()
	return p, nil
}

// extract writes a file of the image (the binary to run) to the kubelet's folder, once.
func (k *Kubelet) extract(image *pulledImage, path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("the command %q is no absolute path; the testenv kubelet does not search PATH", path)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if f, ok := image.files[path]; ok {
		return f, nil
	}
	dir := filepath.Join(k.opts.Dir, "images", strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(image.digest))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, filepath.Base(path))
	if err := ociimage.ExtractFile(image.img, path, dst); err != nil {
		return "", fmt.Errorf("extracting %s from the image: %w", path, err)
	}
	image.files[path] = dst
	return dst, nil
}

// serviceAccountKubeconfig returns a kubeconfig of the platform cluster with a token of the
// pod's ServiceAccount, bound to the pod (it stops working once the pod is deleted).
func (k *Kubelet) serviceAccountKubeconfig(ctx context.Context, pod *corev1.Pod) ([]byte, error) {
	saName := pod.Spec.ServiceAccountName
	if saName == "" {
		saName = "default"
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: saName}}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(3600)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if err := k.c.SubResource("token").Create(ctx, sa, req); err != nil {
		return nil, fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", pod.Namespace, saName, err)
	}
	return tokenKubeconfig(k.opts.Platform, "in-cluster", "system:serviceaccount:"+pod.Namespace+":"+saName, req.Status.Token)
}

// environment resolves the container's environment as the kubelet does: the image's
// variables, then envFrom, then env in order, $(VAR) referring to earlier ones.
func (k *Kubelet) environment(ctx context.Context, pod *corev1.Pod, ctr *corev1.Container, imageEnv []string) ([]string, error) {
	var names []string
	values := map[string]string{}
	set := func(n, v string) {
		if _, ok := values[n]; !ok {
			names = append(names, n)
		}
		values[n] = v
	}
	for _, kv := range imageEnv {
		n, v, _ := strings.Cut(kv, "=")
		set(n, v)
	}
	for _, from := range ctr.EnvFrom {
		data, err := k.envSource(ctx, pod.Namespace, from)
		if err != nil {
			return nil, err
		}
		for n, v := range data {
			set(from.Prefix+n, v)
		}
	}
	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			set(e.Name, expandEnv(e.Value, values))
			continue
		}
		v, err := k.envValueFrom(ctx, pod, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		set(e.Name, v)
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, n+"="+values[n])
	}
	return out, nil
}

func (k *Kubelet) envValueFrom(ctx context.Context, pod *corev1.Pod, src *corev1.EnvVarSource) (string, error) {
	switch {
	case src.FieldRef != nil:
		path := src.FieldRef.FieldPath
		switch {
		case path == "metadata.name":
			return pod.Name, nil
		case path == "metadata.namespace":
			return pod.Namespace, nil
		case path == "metadata.uid":
			return string(pod.UID), nil
		case path == "spec.nodeName":
			return k.opts.NodeName, nil
		case path == "spec.serviceAccountName":
			return pod.Spec.ServiceAccountName, nil
		case path == "status.hostIP", path == "status.hostIPs", path == "status.podIP", path == "status.podIPs":
			return "127.0.0.1", nil
		case strings.HasPrefix(path, "metadata.labels['"):
			return pod.Labels[strings.TrimSuffix(strings.TrimPrefix(path, "metadata.labels['"), "']")], nil
		case strings.HasPrefix(path, "metadata.annotations['"):
			return pod.Annotations[strings.TrimSuffix(strings.TrimPrefix(path, "metadata.annotations['"), "']")], nil
		}
		return "", fmt.Errorf("unsupported fieldRef %s", path)
	case src.SecretKeyRef != nil:
		s := &corev1.Secret{}
		if err := k.c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: src.SecretKeyRef.Name}, s); err != nil {
			if apierrors.IsNotFound(err) && src.SecretKeyRef.Optional != nil && *src.SecretKeyRef.Optional {
				return "", nil
			}
			return "", err
		}
		return string(s.Data[src.SecretKeyRef.Key]), nil
	case src.ConfigMapKeyRef != nil:
		cm := &corev1.ConfigMap{}
		if err := k.c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: src.ConfigMapKeyRef.Name}, cm); err != nil {
			if apierrors.IsNotFound(err) && src.ConfigMapKeyRef.Optional != nil && *src.ConfigMapKeyRef.Optional {
				return "", nil
			}
			return "", err
		}
		return cm.Data[src.ConfigMapKeyRef.Key], nil
	}
	return "", fmt.Errorf("unsupported valueFrom")
}

func (k *Kubelet) envSource(ctx context.Context, namespace string, from corev1.EnvFromSource) (map[string]string, error) {
	out := map[string]string{}
	switch {
	case from.SecretRef != nil:
		s := &corev1.Secret{}
		if err := k.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: from.SecretRef.Name}, s); err != nil {
			if apierrors.IsNotFound(err) && from.SecretRef.Optional != nil && *from.SecretRef.Optional {
				return out, nil
			}
			return nil, err
		}
		for n, v := range s.Data {
			out[n] = string(v)
		}
	case from.ConfigMapRef != nil:
		cm := &corev1.ConfigMap{}
		if err := k.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: from.ConfigMapRef.Name}, cm); err != nil {
			if apierrors.IsNotFound(err) && from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
				return out, nil
			}
			return nil, err
		}
		for n, v := range cm.Data {
			out[n] = v
		}
	}
	return out, nil
}

// expandEnv replaces $(NAME) with earlier variables' values; $$ escapes a $; unknown
// references stay as they are (Kubernetes' rules).
func expandEnv(s string, values map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			n := s[i+2 : i+2+end]
			if v, ok := values[n]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// dockerCredentials finds a registry's user and password in a .dockerconfigjson.
func dockerCredentials(data []byte, registry string) (string, string, bool) {
	var cfg struct {
		Auths map[string]struct {
			Username, Password, Auth string
		} `json:"auths"`
	}
	if json.Unmarshal(data, &cfg) != nil {
		return "", "", false
	}
	for host, a := range cfg.Auths {
		h := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(host, "https://"), "http://"), "/")
		if h != registry {
			continue
		}
		if a.Username == "" && a.Auth != "" {
			if raw, err := base64.StdEncoding.DecodeString(a.Auth); err == nil {
				a.Username, a.Password, _ = strings.Cut(string(raw), ":")
			}
		}
		return a.Username, a.Password, a.Username != ""
	}
	return "", "", false
}

// setStatus updates the pod's status with mutate, retrying on conflicts; a pod that is gone
// is left alone.
func (k *Kubelet) setStatus(ctx context.Context, pod *corev1.Pod, mutate func(*corev1.PodStatus)) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &corev1.Pod{}
		if err := k.c.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
			return err
		}
		if cur.UID != pod.UID {
			return nil
		}
		cur.Status.HostIP, cur.Status.PodIP = "127.0.0.1", "127.0.0.1"
		cur.Status.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
		cur.Status.PodIPs = []corev1.PodIP{{IP: "127.0.0.1"}}
		mutate(&cur.Status)
		return k.c.Status().Update(ctx, cur)
	})
	if client.IgnoreNotFound(err) != nil && ctx.Err() == nil {
		fmt.Fprintf(k.opts.Log, "kubelet: pod %s/%s: updating status: %v\n", pod.Namespace, pod.Name, err)
	}
}

func setConditions(s *corev1.PodStatus, ready bool) {
	now := metav1.Now()
	readyStatus := corev1.ConditionFalse
	if ready {
		readyStatus = corev1.ConditionTrue
	}
	want := map[corev1.PodConditionType]corev1.ConditionStatus{
		corev1.PodScheduled: corev1.ConditionTrue, corev1.PodInitialized: corev1.ConditionTrue,
		corev1.PodReadyToStartContainers: corev1.ConditionTrue,
		corev1.ContainersReady:           readyStatus, corev1.PodReady: readyStatus,
	}
	var conds []corev1.PodCondition
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled} {
		c := corev1.PodCondition{Type: t, Status: want[t], LastTransitionTime: now}
		for _, old := range s.Conditions {
			if old.Type == t && old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		conds = append(conds, c)
	}
	s.Conditions = conds
}

func waiting(s *corev1.PodStatus, pod *corev1.Pod, reason, message string) {
	s.Phase = corev1.PodPending
	setConditions(s, false)
	s.ContainerStatuses = []corev1.ContainerStatus{{
		Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image, Started: ptr.To(false),
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}},
	}}
}

func lastState(t *corev1.ContainerStateTerminated) corev1.ContainerState {
	if t == nil {
		return corev1.ContainerState{}
	}
	return corev1.ContainerState{Terminated: t}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
