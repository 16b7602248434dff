package testenv

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A pod's container run by the Kubelet: started, restarted with a back-off as the
// restartPolicy says, stopped as a deleted pod's is; and the pod's status, which
// follows the process.

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
	_ = signalGroup(proc.Process, syscall.SIGTERM)
	select {
	case err := <-exited:
		return exitCode(err), true
	case <-time.After(grace):
	}
	_ = signalGroup(proc.Process, syscall.SIGKILL)
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
