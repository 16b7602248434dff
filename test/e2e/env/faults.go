package env

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// Faults: what the fault suite (test/e2e/faults_test.go) does to a running environment.
// The provider, Flux's controllers and the registry are processes on both backends; the
// API servers can be stopped and started only on the process backend.

// faultHandles reach below the environment.
type faultHandles struct {
	// te is testenv's environment (process backend only).
	te *testenv.E2E
	// flux runs on both backends.
	flux *testenv.Flux
	// platform is the platform cluster's API server (process backend only).
	platform *testenv.Cluster
}

var errNotOnThisBackend = errors.New("only the process backend can stop and start API servers and add ControlPlanes")

// KillProvider kills the provider's process with SIGKILL, as a crash or an OOM kill
// would, and waits until it has died. RestartProvider starts it again.
func (e *Env) KillProvider() error {
	return e.Provider.Kill()
}

// RestartProvider starts the provider again with the same arguments after KillProvider
// (or after it ended for another reason) and waits until it reports ready. Its log
// continues in the same file.
func (e *Env) RestartProvider(ctx context.Context) error {
	if e.Provider.ExitError() == nil {
		return fmt.Errorf("the provider (pid %d) still runs", e.Provider.Pid())
	}
	p, err := e.Provider.Restart()
	if err != nil {
		return err
	}
	e.Provider = p
	return waitReady(ctx, p, "http://"+e.probeAt+"/readyz")
}

// StopFluxController stops one of Flux's controllers (testenv.SourceController.Name or
// testenv.HelmController.Name); StartFluxController starts it again.
func (e *Env) StopFluxController(name string) error {
	if e.faults.flux == nil {
		return errors.New("the environment runs no Flux")
	}
	return e.faults.flux.StopController(name)
}

// StartFluxController starts a controller stopped with StopFluxController again and
// waits until it is ready.
func (e *Env) StartFluxController(ctx context.Context, name string) error {
	if e.faults.flux == nil {
		return errors.New("the environment runs no Flux")
	}
	return e.faults.flux.StartController(ctx, name)
}

// StopRegistry stops the registry that holds kro's chart; StartRegistry starts it again
// on the same address with the same content.
func (e *Env) StopRegistry() error { return e.Registry.Stop() }

// StartRegistry starts the registry stopped with StopRegistry again and waits until it
// answers.
func (e *Env) StartRegistry(ctx context.Context) error { return e.Registry.Start(ctx) }

// StopPlatformAPIServer stops the platform cluster's kube-apiserver; etcd keeps the data.
// StartPlatformAPIServer brings it back on the same address with the same certificates.
func (e *Env) StopPlatformAPIServer() error {
	if e.faults.platform == nil {
		return errNotOnThisBackend
	}
	return e.faults.platform.StopAPIServer()
}

// StartPlatformAPIServer starts the platform cluster's kube-apiserver again and waits
// until it answers.
func (e *Env) StartPlatformAPIServer() error {
	if e.faults.platform == nil {
		return errNotOnThisBackend
	}
	return e.faults.platform.StartAPIServer()
}

// StopControlPlaneAPIServer kills the kube-apiserver of a ControlPlane (SIGKILL); its etcd
// and the rest of the ControlPlane keep running. StartControlPlaneAPIServer brings it
// back on the same address, so its kubeconfig stays valid.
func (e *Env) StopControlPlaneAPIServer(cp *ControlPlane) error {
	kc, err := e.kwok(cp)
	if err != nil {
		return err
	}
	return kc.StopAPIServer()
}

// StartControlPlaneAPIServer starts a ControlPlane's kube-apiserver again and waits until
// it answers.
func (e *Env) StartControlPlaneAPIServer(ctx context.Context, cp *ControlPlane) error {
	kc, err := e.kwok(cp)
	if err != nil {
		return err
	}
	return kc.StartAPIServer(ctx)
}

func (e *Env) kwok(cp *ControlPlane) (*testenv.KwokCluster, error) {
	if e.faults.te == nil {
		return nil, errNotOnThisBackend
	}
	kc := e.faults.te.ControlPlane(cp.Name)
	if kc == nil {
		return nil, fmt.Errorf("no ControlPlane %q", cp.Name)
	}
	return kc, nil
}

// AddControlPlanes starts more ControlPlanes (kwok clusters, one after the other) while
// the environment runs, and gives each a tenant namespace with its access secret on the
// platform cluster, as Start does. They are appended to ControlPlanes; Stop stops them
// with the rest, RemoveControlPlane earlier.
func (e *Env) AddControlPlanes(ctx context.Context, refs ...ControlPlaneRef) ([]*ControlPlane, error) {
	if e.faults.te == nil {
		return nil, errNotOnThisBackend
	}
	var added []*ControlPlane
	for _, ref := range refs {
		kc, err := e.faults.te.AddControlPlane(ctx, e.log, ref.Name)
		if err != nil {
			return added, err
		}
		cp := &ControlPlane{
			Cluster:   Cluster{Name: kc.Name, Config: kc.Config, Client: kc.Client, Kubeconfig: kc.Kubeconfig},
			Namespace: ref.Namespace,
		}
		kro := &v1alpha1.Kro{ObjectMeta: metav1.ObjectMeta{Name: cp.Name, Namespace: cp.Namespace}}
		if cp.TenantNamespace, err = owned.TenantNamespace(kro); err != nil {
			return added, err
		}
		e.ControlPlanes = append(e.ControlPlanes, cp)
		added = append(added, cp)
		if err := createIfMissing(ctx, e.Platform.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cp.TenantNamespace}}); err != nil {
			return added, err
		}
		if err := createIfMissing(ctx, e.Platform.Client, e.AccessSecret(cp)); err != nil {
			return added, err
		}
	}
	return added, nil
}

// RemoveControlPlane stops a ControlPlane (its kro controller, if one runs, and its
// cluster), deletes its access secret from the platform cluster and drops it from
// ControlPlanes. Its Kro should be gone first.
func (e *Env) RemoveControlPlane(ctx context.Context, name string) error {
	cp := e.ControlPlane(name)
	if cp == nil {
		return nil
	}
	if e.faults.te == nil {
		return errNotOnThisBackend
	}
	errs := []error{e.kros.stop(name), e.faults.te.RemoveControlPlane(name)}
	if err := e.Platform.Client.Delete(ctx, e.AccessSecret(cp)); client.IgnoreNotFound(err) != nil {
		errs = append(errs, err)
	}
	e.ControlPlanes = slices.DeleteFunc(e.ControlPlanes, func(c *ControlPlane) bool { return c.Name == name })
	return errors.Join(errs...)
}
