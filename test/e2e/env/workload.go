package env

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/controllers/reach"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// Workload clusters for the WorkloadCluster placement: a kwok cluster that tenants
// share, its kubeconfig given to each tenant by a labelled secret (standalone), and
// kro's controller run as a process with the credential the provider prepared for it
// on that cluster, not with the ControlPlane's admin kubeconfig.

// WorkloadSecretName names the labelled secret with a workload cluster's kubeconfig in a
// tenant namespace.
const WorkloadSecretName = "workload-cluster-kubeconfig"

// AddWorkloadCluster starts a kwok cluster to run kro on. It is stopped with the rest of
// the environment; its API server can be stopped and started like a ControlPlane's
// (StopControlPlaneAPIServer), which is why it comes as a *ControlPlane, with no tenant
// namespace: it is nobody's ControlPlane.
func (e *Env) AddWorkloadCluster(ctx context.Context, name string) (*ControlPlane, error) {
	if e.faults.te == nil {
		return nil, errNotOnThisBackend
	}
	kc, err := e.faults.te.AddControlPlane(ctx, e.log, name)
	if err != nil {
		return nil, err
	}
	return &ControlPlane{Cluster: Cluster{Name: kc.Name, Config: kc.Config, Client: kc.Client, Kubeconfig: kc.Kubeconfig}}, nil
}

// WorkloadSecret is the secret that gives a ControlPlane's tenant the workload cluster wc.
func (e *Env) WorkloadSecret(cp, wc *ControlPlane) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cp.TenantNamespace,
			Name:      WorkloadSecretName,
			Labels:    map[string]string{v1alpha1.LabelWorkloadClusterKubeconfig: "true"},
		},
		Data: map[string][]byte{owned.KubeconfigKey: wc.Kubeconfig},
	}
}

// WorkloadNamespace is where kro runs for cp on a workload cluster.
func WorkloadNamespace(cp *ControlPlane) (string, error) {
	return reach.WorkloadNamespace(client.ObjectKey{Namespace: cp.Namespace, Name: cp.Name})
}

// KroCredential reads the credential the provider wrote for cp's kro on wc: the
// kubeconfig and the files it names.
func KroCredential(ctx context.Context, cp, wc *ControlPlane) (kubeconfig []byte, files map[string][]byte, err error) {
	return kroCredential(ctx, wc.Client, wc.Name, client.ObjectKey{Namespace: cp.Namespace, Name: cp.Name})
}

func kroCredential(ctx context.Context, wc client.Client, wcName string, tenant client.ObjectKey) (kubeconfig []byte, files map[string][]byte, err error) {
	ns, err := reach.WorkloadNamespace(tenant)
	if err != nil {
		return nil, nil, err
	}
	secret := &corev1.Secret{}
	if err := wc.Get(ctx, client.ObjectKey{Namespace: ns, Name: owned.KroCredentialSecretName}, secret); err != nil {
		return nil, nil, fmt.Errorf("reading kro's credential on workload cluster %s: %w", wcName, err)
	}
	files = map[string][]byte{}
	for k, v := range secret.Data {
		if k != owned.KubeconfigKey {
			files[k] = v
		}
	}
	return secret.Data[owned.KubeconfigKey], files, nil
}

// StartKroControllerOnWorkload runs kro's controller for cp as it runs on the workload
// cluster wc: with the kubeconfig, token and CA the provider wrote into the tenant's
// namespace there, once the provider has put kro's CRDs on cp. Its files are below
// dir/kro/<name>-workload.
func (e *Env) StartKroControllerOnWorkload(ctx context.Context, cp, wc *ControlPlane) error {
	if e.Backend != BackendProcess {
		return errNotOnThisBackend
	}
	return startKroControllerWithCredential(ctx, e.log, e.Dir, &e.kros, &cp.Cluster, &wc.Cluster, client.ObjectKey{Namespace: cp.Namespace, Name: cp.Name})
}

// startKroControllerWithCredential runs kro's controller for the ControlPlane cp of
// tenant with the credential the provider wrote on the workload cluster wc.
func startKroControllerWithCredential(ctx context.Context, log io.Writer, dir string, kros *kroControllers, cp, wc *Cluster, tenant client.ObjectKey) error {
	if err := testenv.WaitForCRD(ctx, cp.Client, RGDCRD, time.Second); err != nil {
		return fmt.Errorf("%s: %w", cp.Name, err)
	}
	kubeconfig, files, err := kroCredential(ctx, wc.Client, wc.Name, tenant)
	if err != nil {
		return err
	}
	name := cp.Name + "-workload"
	p, err := testenv.StartKroController(ctx, log, testenv.KroControllerOptions{
		Name: "kro-controller-" + name, Kubeconfig: kubeconfig, Files: files, Dir: filepath.Join(dir, "kro", name),
	})
	if err != nil {
		return err
	}
	return kros.add(name, p)
}

// StopKroControllerOnWorkload stops the controller StartKroControllerOnWorkload started.
func (e *Env) StopKroControllerOnWorkload(cp *ControlPlane) error {
	return e.kros.stop(cp.Name + "-workload")
}

// StopKroController stops the controller StartKroController started for cp, if any.
func (e *Env) StopKroController(cp *ControlPlane) error {
	return e.kros.stop(cp.Name)
}
