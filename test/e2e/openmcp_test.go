//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-project/openmcp-operator/api/clusters/v1alpha1"
	commonapi "github.com/openmcp-project/openmcp-operator/api/common"
	corev2alpha1 "github.com/openmcp-project/openmcp-operator/api/core/v2alpha1"
	providerv1alpha1 "github.com/openmcp-project/openmcp-operator/api/provider/v1alpha1"
	libutils "github.com/openmcp-project/openmcp-operator/lib/utils"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
	"github.com/openmcp-project/service-provider-kro/config"
	"github.com/openmcp-project/service-provider-kro/controllers/owned"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
	"github.com/openmcp-project/service-provider-kro/test/testenv"
)

// The openmcp spec runs the provider the way OpenControlPlane does: openmcp-operator
// v1.3.0 deploys it from its image, the test plays only a cluster provider and a kubelet
// (see env.StartOpenMCP). It has an environment of its own.
var _ = Describe("under openmcp-operator", Ordered, Label("openmcp"), SpecPriority(1), func() { // the longest but the faults: started first
	const (
		providerName = "kro"
		cpName       = "mcp-1"
		cpNamespace  = "tenant-a"
		kroVersion   = "v0.9.4"
	)
	var (
		om          *env.OpenMCPEnv
		onboarding  client.Client // knows openmcp's and this provider's kinds
		platform    client.Client
		cp          *env.Cluster
		platformNS  string
		rgd         *unstructured.Unstructured
		spStarted   time.Time
		openmcpLogs string
	)
	omMeasure := func(stage string, f func()) { measure("openmcp: "+stage, f) }
	obj := func(o client.Object) client.ObjectKey { return client.ObjectKeyFromObject(o) }

	BeforeAll(func() {
		openmcpLogs = filepath.Join(logDir, "openmcp")
		start := time.Now()
		var err error
		cpNames := []string{cpName}
		for _, t := range openmcpWorkloadTenants {
			cpNames = append(cpNames, t.Name)
		}
		om, err = env.StartOpenMCP(suiteCtx, env.OpenMCPOptions{Dir: openmcpLogs, Log: GinkgoWriter, ControlPlanes: cpNames, WorkloadCluster: "workload-1"})
		DeferCleanup(func() {
			if err := om.Stop(); err != nil {
				fmt.Fprintf(GinkgoWriter, "stopping the openmcp environment: %v\n", err)
			}
		})
		Expect(err).NotTo(HaveOccurred())
		for _, t := range om.Timings {
			recordTiming("openmcp bring-up: "+t.Step, t.Duration)
		}
		recordTiming("openmcp bring-up (total)", time.Since(start))
		scheme := testenv.NewOpenMCPScheme()
		Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
		Expect(helmv2.AddToScheme(scheme)).To(Succeed())
		Expect(sourcev1.AddToScheme(scheme)).To(Succeed())
		onboarding, err = client.New(om.Onboarding.Config, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		platform, err = client.New(om.Platform.Config, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		cp = om.ControlPlane(cpName)
		platformNS, err = libutils.StableMCPNamespace(cpName, cpNamespace)
		Expect(err).NotTo(HaveOccurred())
	})

	It("deploys the provider from a ServiceProvider until it is Ready", func() {
		sp := &providerv1alpha1.ServiceProvider{
			ObjectMeta: metav1.ObjectMeta{Name: providerName},
			Spec: providerv1alpha1.ServiceProviderSpec{DeploymentSpec: providerv1alpha1.DeploymentSpec{
				Image:            om.Image,
				ImagePullSecrets: []commonapi.LocalObjectReference{{Name: om.PullSecretName}},
				Verbosity:        "DEBUG",
			}},
		}
		spStarted = time.Now()
		omMeasure("ServiceProvider → init Job succeeded", func() {
			Expect(platform.Create(suiteCtx, sp)).To(Succeed())
			eventually(5*time.Minute, func(g Gomega) {
				job := &batchv1.Job{}
				g.Expect(platform.Get(suiteCtx, client.ObjectKey{Namespace: om.Namespace, Name: "sp-" + providerName + "-init"}, job)).To(Succeed())
				g.Expect(job.Status.Succeeded).To(BeNumerically(">", 0), "init Job: %+v\n%s", job.Status, podsSummary(om, "init-job"))
			})
		})
		omMeasure("init Job → ServiceProvider Ready", func() {
			eventually(5*time.Minute, func(g Gomega) {
				g.Expect(platform.Get(suiteCtx, obj(sp), sp)).To(Succeed())
				ready := apimeta.FindStatusCondition(sp.Status.Conditions, "Ready")
				g.Expect(ready).NotTo(BeNil(), "ServiceProvider status: %+v", sp.Status)
				g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "ServiceProvider status: %+v\n%s", sp.Status, podsSummary(om, "controller"))
			})
		})
		By("the init Job's pod ran the image's binary with openmcp's arguments and exited 0")
		pods, err := om.PodsOf(suiteCtx, map[string]string{"app.kubernetes.io/instance": providerName, "app.kubernetes.io/component": "init-job"})
		Expect(err).NotTo(HaveOccurred())
		Expect(pods).NotTo(BeEmpty())
		succeeded := false
		for _, p := range pods {
			if p.Status.Phase == corev1.PodSucceeded {
				succeeded = true
				Expect(p.Spec.Containers[0].Args).To(Equal([]string{"init", "--environment=" + om.OpenMCP.Environment, "--verbosity=DEBUG", "--provider-name=" + providerName}))
				Expect(p.Status.ContainerStatuses[0].State.Terminated.ExitCode).To(BeZero())
				Expect(p.Status.ContainerStatuses[0].ImageID).To(ContainSubstring("@sha256:"))
			}
		}
		Expect(succeeded).To(BeTrue(), podsSummary(om, "init-job"))
		By("the run Deployment's pod is Running and Ready")
		depl := &appsv1.Deployment{}
		Expect(platform.Get(suiteCtx, client.ObjectKey{Namespace: om.Namespace, Name: "sp-" + providerName}, depl)).To(Succeed())
		Expect(depl.Status.AvailableReplicas).To(BeEquivalentTo(1))
		pods, err = om.PodsOf(suiteCtx, map[string]string{"app.kubernetes.io/instance": providerName, "app.kubernetes.io/component": "controller"})
		Expect(err).NotTo(HaveOccurred())
		Expect(pods).To(HaveLen(1))
		Expect(pods[0].Status.Phase).To(Equal(corev1.PodRunning))
		Expect(pods[0].Spec.Containers[0].Args).To(HaveExactElements("run", "--environment="+om.OpenMCP.Environment,
			"--verbosity=DEBUG", "--provider-name="+providerName, "--metrics-bind-address=:8080", "--metrics-secure=false"))
		By("config/monitoring/openmcp's PodMonitor and NetworkPolicy select the pod and its metrics port")
		expectMonitoringSelects(pods[0])
		By("init registered the Kro kind on the ServiceProvider")
		Expect(platform.Get(suiteCtx, obj(sp), sp)).To(Succeed())
		Expect(sp.Status.Resources).To(ContainElement(metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Kind: "Kro"}))
		By("the provider asked for onboarding access through openmcp, and got it")
		// openmcp's pods have no readiness probe: the run pod is Ready once started, which
		// is before the provider has asked for its onboarding access.
		for _, name := range []string{providerName + "--onboarding-init", providerName + "--onboarding"} {
			eventually(time.Minute, func(g Gomega) {
				ar := &clustersv1alpha1.AccessRequest{}
				g.Expect(platform.Get(suiteCtx, client.ObjectKey{Namespace: om.Namespace, Name: name}, ar)).To(Succeed())
				g.Expect(ar.Status.Phase).To(Equal(clustersv1alpha1.REQUEST_GRANTED))
			})
		}
		fmt.Fprintf(GinkgoWriter, "ServiceProvider Ready %s after it was applied\n", time.Since(spStarted).Round(100*time.Millisecond))
	})

	It("installs kro on a ControlPlane a tenant creates, through an AccessRequest", func() {
		omMeasure("ControlPlane and Kro → Kro Ready", func() {
			pc := &v1alpha1.ProviderConfig{
				ObjectMeta: metav1.ObjectMeta{Name: providerName},
				Spec: v1alpha1.ProviderConfigSpec{
					PollInterval: &metav1.Duration{Duration: 10 * time.Second},
					Versions: []v1alpha1.KroVersion{{
						Version: kroVersion, ChartVersion: strings.TrimPrefix(kroVersion, "v"), ChartURL: om.ChartURL, ChartPullSecret: om.PullSecretName,
					}},
				},
			}
			Expect(platform.Create(suiteCtx, pc)).To(Succeed())
			Expect(onboarding.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cpNamespace}})).To(Succeed())
			Expect(onboarding.Create(suiteCtx, &corev2alpha1.ControlPlane{ObjectMeta: metav1.ObjectMeta{Name: cpName, Namespace: cpNamespace}})).To(Succeed())
			Expect(onboarding.Create(suiteCtx, &v1alpha1.Kro{
				ObjectMeta: metav1.ObjectMeta{Name: cpName, Namespace: cpNamespace},
				Spec:       v1alpha1.KroSpec{Version: kroVersion},
			})).To(Succeed())
			// kro's controller plays kro's Deployment on the kwok ControlPlane once its chart is in.
			Expect(om.StartKroController(suiteCtx, cp)).To(Succeed())
			eventually(5*time.Minute, func(g Gomega) {
				kro := &v1alpha1.Kro{}
				g.Expect(onboarding.Get(suiteCtx, client.ObjectKey{Namespace: cpNamespace, Name: cpName}, kro)).To(Succeed())
				ready := condition(kro, v1alpha1.ConditionReady)
				g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), describeKro(kro))
				g.Expect(kro.Status.ChartVersion).To(Equal(strings.TrimPrefix(kroVersion, "v")), describeKro(kro))
			})
		})
		By("the ControlPlane is Ready in openmcp's eyes")
		mcp := &corev2alpha1.ControlPlane{}
		Expect(onboarding.Get(suiteCtx, client.ObjectKey{Namespace: cpNamespace, Name: cpName}, mcp)).To(Succeed())
		fmt.Fprintf(GinkgoWriter, "ControlPlane status: phase %s %+v\n", mcp.Status.Phase, mcp.Status.Conditions)
		By("the provider reached the ControlPlane through a granted AccessRequest in the ControlPlane's platform namespace")
		var ars clustersv1alpha1.AccessRequestList
		Expect(platform.List(suiteCtx, &ars, client.InNamespace(platformNS))).To(Succeed())
		var granted []string
		for _, ar := range ars.Items {
			if ar.Spec.RequestRef != nil && ar.Spec.RequestRef.Name == cpName && ar.Status.IsGranted() {
				granted = append(granted, ar.Name)
			}
		}
		Expect(granted).NotTo(BeEmpty(), "AccessRequests in %s: %+v", platformNS, ars.Items)
		By("kro runs on the ControlPlane")
		eventually(time.Minute, func(g Gomega) {
			var list appsv1.DeploymentList
			g.Expect(cp.Client.List(suiteCtx, &list, client.InNamespace(owned.KroNamespace))).To(Succeed())
			g.Expect(list.Items).NotTo(BeEmpty())
		})
		By("a tenant's ResourceGraphDefinition is counted")
		rgd = testenv.ConfigMapRGD("openmcp-app", "OpenMCPApp")
		Expect(cp.Client.Create(suiteCtx, rgd)).To(Succeed())
		eventually(2*time.Minute, func(g Gomega) {
			kro := &v1alpha1.Kro{}
			g.Expect(onboarding.Get(suiteCtx, client.ObjectKey{Namespace: cpNamespace, Name: cpName}, kro)).To(Succeed())
			g.Expect(kro.Status.ResourceGraphDefinitions).NotTo(BeNil(), describeKro(kro))
			g.Expect(kro.Status.ResourceGraphDefinitions.Total).To(BeEquivalentTo(1), describeKro(kro))
		})
	})

	It("deletes the Kro through openmcp when the ControlPlane is deleted, waiting for the RGD", func() {
		mcp := &corev2alpha1.ControlPlane{ObjectMeta: metav1.ObjectMeta{Name: cpName, Namespace: cpNamespace}}
		kroKey := client.ObjectKey{Namespace: cpNamespace, Name: cpName}
		omMeasure("ControlPlane deleted → Kro DeletionBlocked", func() {
			Expect(onboarding.Delete(suiteCtx, mcp)).To(Succeed())
			eventually(2*time.Minute, func(g Gomega) {
				kro := &v1alpha1.Kro{}
				g.Expect(onboarding.Get(suiteCtx, kroKey, kro)).To(Succeed())
				g.Expect(kro.DeletionTimestamp).NotTo(BeNil(), "openmcp has not deleted the Kro: %s", describeKro(kro))
				blocked := condition(kro, v1alpha1.ConditionDeletionBlocked)
				g.Expect(blocked.Status).To(Equal(metav1.ConditionTrue), describeKro(kro))
				g.Expect(blocked.Reason).To(Equal(v1alpha1.ReasonUserResourcesPresent), describeKro(kro))
			})
		})
		By("the ControlPlane waits for its services")
		Consistently(func(g Gomega) {
			g.Expect(onboarding.Get(suiteCtx, obj(mcp), mcp)).To(Succeed())
			g.Expect(platform.Get(suiteCtx, client.ObjectKey{Namespace: platformNS, Name: providerName}, &helmv2.HelmRelease{})).To(Succeed())
		}).WithContext(suiteCtx).WithTimeout(5 * time.Second).WithPolling(time.Second).Should(Succeed())
		cond := apimeta.FindStatusCondition(mcp.Status.Conditions, corev2alpha1.ConditionAllServicesDeleted)
		Expect(cond).NotTo(BeNil(), "ControlPlane conditions: %+v", mcp.Status.Conditions)
		Expect(cond.Status).To(Equal(metav1.ConditionFalse))

		omMeasure("RGD deleted → Kro gone", func() {
			Expect(cp.Client.Delete(suiteCtx, rgd)).To(Succeed())
			Eventually(func(g Gomega) {
				kro := &v1alpha1.Kro{}
				err := onboarding.Get(suiteCtx, kroKey, kro)
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "still there: %s", describeKro(kro))
			}).WithContext(suiteCtx).WithTimeout(5 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
		})
		// Checked at once: openmcp deletes the ControlPlane's platform namespace, and with it
		// whatever is left there, only after the Kro is gone and the ControlPlane's requests
		// are deleted.
		By("no Flux object and no secret copy is left on the platform")
		ns := &corev1.Namespace{}
		Expect(platform.Get(suiteCtx, client.ObjectKey{Name: platformNS}, ns)).To(Succeed())
		Expect(ns.DeletionTimestamp).To(BeNil(), "openmcp already deletes %s: too late to see what the provider left there", platformNS)
		// A Flux object the provider deleted may still wait for its Flux controller's
		// finalizer: deleted, it is not left behind.
		var repos sourcev1.OCIRepositoryList
		Expect(platform.List(suiteCtx, &repos)).To(Succeed())
		Expect(notBeingDeleted(&repos)).To(BeEmpty())
		var hrs helmv2.HelmReleaseList
		Expect(platform.List(suiteCtx, &hrs)).To(Succeed())
		Expect(notBeingDeleted(&hrs)).To(BeEmpty())
		var copies corev1.SecretList
		Expect(platform.List(suiteCtx, &copies, client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue})).To(Succeed())
		Expect(copies.Items).To(BeEmpty())
		By("kro is uninstalled from the ControlPlane")
		expectKroUninstalled(cp.Client)
		omMeasure("Kro gone → ControlPlane gone", func() {
			eventually(5*time.Minute, func(g Gomega) {
				err := onboarding.Get(suiteCtx, obj(mcp), mcp)
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ControlPlane still there: %+v", mcp.Status)
			})
		})
		By("the provider's AccessRequest for the ControlPlane is gone, and its token revoked")
		eventually(time.Minute, func(g Gomega) {
			var ars clustersv1alpha1.AccessRequestList
			g.Expect(platform.List(suiteCtx, &ars, client.InNamespace(platformNS))).To(Succeed())
			g.Expect(ars.Items).To(BeEmpty())
			var sas corev1.ServiceAccountList
			g.Expect(cp.Client.List(suiteCtx, &sas, client.InNamespace(testenv.AccessNamespace), client.HasLabels{testenv.AccessServiceAccountLabel})).To(Succeed())
			g.Expect(sas.Items).To(BeEmpty())
		})
		By("the ControlPlane's Cluster is released and its platform namespace is gone")
		eventually(time.Minute, func(g Gomega) {
			var clusters clustersv1alpha1.ClusterList
			g.Expect(platform.List(suiteCtx, &clusters, client.InNamespace(platformNS))).To(Succeed())
			g.Expect(clusters.Items).To(BeEmpty())
			err := platform.Get(suiteCtx, client.ObjectKey{Name: platformNS}, &corev1.Namespace{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "namespace %s: %v", platformNS, err)
		})
	})

	openmcpWorkloadSpecs(openmcpKit{
		om: func() *env.OpenMCPEnv { return om }, providerName: providerName,
		onboarding: func() client.Client { return onboarding }, platform: func() client.Client { return platform },
	})
})

// podsSummary describes the provider's pods of a component (init-job, controller) and the
// end of each one's log, for failure messages.
func podsSummary(om *env.OpenMCPEnv, component string) string {
	pods, err := om.PodsOf(suiteCtx, map[string]string{"app.kubernetes.io/component": component})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "pod %s: %s", p.Name, p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " restarts=%d state=%+v", cs.RestartCount, cs.State)
		}
		if data, err := os.ReadFile(om.Kubelet.PodLogPath(p.Namespace, p.Name)); err == nil {
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			if len(lines) > 15 {
				lines = lines[len(lines)-15:]
			}
			fmt.Fprintf(&b, "\n    %s", strings.Join(lines, "\n    "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// notBeingDeleted names the objects of a list that nobody has deleted.
func notBeingDeleted(list client.ObjectList) []string {
	GinkgoHelper()
	objs, err := apimeta.ExtractList(list)
	Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, o := range objs {
		if m, ok := o.(client.Object); ok && m.GetDeletionTimestamp().IsZero() {
			out = append(out, m.GetNamespace()+"/"+m.GetName())
		}
	}
	return out
}

// expectMonitoringSelects renders config/monitoring/openmcp and checks that its PodMonitor
// and NetworkPolicy select the pod openmcp-operator runs, by its labels and the name of
// its metrics port.
func expectMonitoringSelects(pod corev1.Pod) {
	GinkgoHelper()
	objs, err := config.Render("monitoring/openmcp")
	Expect(err).NotTo(HaveOccurred())
	var ports []string
	for _, p := range pod.Spec.Containers[0].Ports {
		ports = append(ports, p.Name)
	}
	checked := 0
	for _, o := range objs {
		var labels map[string]string
		var port string
		switch o.GetKind() {
		case "PodMonitor":
			labels, _, _ = unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
			endpoints, _, _ := unstructured.NestedSlice(o.Object, "spec", "podMetricsEndpoints")
			Expect(endpoints).To(HaveLen(1))
			port, _ = endpoints[0].(map[string]any)["port"].(string)
		case "NetworkPolicy":
			labels, _, _ = unstructured.NestedStringMap(o.Object, "spec", "podSelector", "matchLabels")
			rules, _, _ := unstructured.NestedSlice(o.Object, "spec", "ingress")
			Expect(rules).To(HaveLen(1))
			rulePorts, _, _ := unstructured.NestedSlice(rules[0].(map[string]any), "ports")
			Expect(rulePorts).To(HaveLen(1))
			port, _ = rulePorts[0].(map[string]any)["port"].(string)
		default:
			continue
		}
		checked++
		Expect(o.GetNamespace()).To(Equal(pod.Namespace), "%s %s", o.GetKind(), o.GetName())
		for k, v := range labels {
			Expect(pod.Labels).To(HaveKeyWithValue(k, v), "%s %s selects the pod", o.GetKind(), o.GetName())
		}
		Expect(ports).To(ContainElement(port), "%s %s names the pod's metrics port", o.GetKind(), o.GetName())
	}
	Expect(checked).To(Equal(2), "a PodMonitor and a NetworkPolicy")
}
