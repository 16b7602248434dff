package testenv

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-project/service-provider-kro/hack/image/ociimage"
)

// The Kubelet: one node of a cluster whose pods are local processes. This file holds the
// node and the sync of the pods (bound, started, deleted); kubelet_run.go runs a pod's
// container and reports its status, kubelet_container.go prepares what the process is
// started with.

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
// every pod's process. It needs Linux, since the pods' images are linux images.
func StartKubelet(ctx context.Context, opts KubeletOptions) (*Kubelet, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("the testenv kubelet needs Linux: it runs the binaries of linux images as processes of this machine, which is %s", runtime.GOOS)
	}
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
