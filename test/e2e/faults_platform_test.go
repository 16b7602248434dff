//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmcp-project/service-provider-kro/controllers/flux"
	"github.com/openmcp-project/service-provider-kro/test/e2e/env"
)

// The platform cluster's API server restarted in the fault suite while many Kros install.

// platformRestartSpecs stops and starts the platform API server while loadKros Kros
// install: on the ControlPlanes cpA and cpB return and on ControlPlanes added for it.
func platformRestartSpecs(cpA, cpB func() *env.ControlPlane) {
	It("platform API server restarted during many installs", func() {
		a, b := cpA(), cpB()
		extra := loadKros - 2
		row := startRow(fmt.Sprintf("The platform cluster's kube-apiserver stopped for %s and started again while %d Kros install", platformOutage, loadKros),
			"every Kro Ready; nothing orphaned after their deletion")
		cleanUpAfterFailure(a, b)
		if extra < 0 {
			extra = 0
		}
		var refs []env.ControlPlaneRef
		for i := range extra {
			refs = append(refs, env.ControlPlaneRef{Name: fmt.Sprintf("load-%02d", i+1), Namespace: loadNamespace})
		}
		addStart := time.Now()
		added, err := fe.AddControlPlanes(suiteCtx, refs...)
		DeferCleanup(func() {
			for _, cp := range added {
				Expect(fe.RemoveControlPlane(suiteCtx, cp.Name)).To(Succeed())
			}
		})
		Expect(err).NotTo(HaveOccurred())
		cleanUpAfterFailure(added...)
		row.note("%d Kros, one per ControlPlane: fault-a, fault-b and %d kwok ControlPlanes added for this fault (in %s) and removed after it",
			loadKros, len(added), ms(time.Since(addStart)))
		cps := append([]*env.ControlPlane{a, b}, added...)[:loadKros]
		created := time.Now()
		for i, cp := range cps {
			createKro(cp, []string{"v0.9.3", "v0.9.4"}[i%2])
		}
		// Stop while the installs are under way: once a quarter of the HelmReleases exist.
		waitUntil(2*time.Minute, 50*time.Millisecond, func(g Gomega) {
			var hrs helmv2.HelmReleaseList
			g.Expect(fe.Platform.Client.List(suiteCtx, &hrs)).To(Succeed())
			g.Expect(len(hrs.Items)).To(BeNumerically(">=", (len(cps)+3)/4))
		})
		var hrs helmv2.HelmReleaseList
		Expect(fe.Platform.Client.List(suiteCtx, &hrs)).To(Succeed())
		readyHRs := 0
		for _, hr := range hrs.Items {
			if fluxReady(hr.Status.Conditions).Status == metav1.ConditionTrue {
				readyHRs++
			}
		}
		stopping := time.Now()
		Expect(fe.StopPlatformAPIServer()).To(Succeed())
		stopped := time.Now()
		time.Sleep(platformOutage) // the outage itself
		Expect(fe.StartPlatformAPIServer()).To(Succeed())
		restarted := time.Now()
		row.note("stopped %s after the Kros were created, when %d HelmReleases existed and %d were Ready; stopping took %s, down %s, starting %s",
			ms(stopping.Sub(created)), len(hrs.Items), readyHRs, ms(stopped.Sub(stopping)), ms(platformOutage), ms(restarted.Sub(stopped)-platformOutage))
		readyAt := map[string]time.Duration{}
		waitUntil(10*time.Minute, 500*time.Millisecond, func(g Gomega) {
			var waiting []string
			for i, cp := range cps {
				if _, ok := readyAt[cp.Name]; ok {
					continue
				}
				// Each Kro on its own, so that every one's time is seen.
				if err := InterceptGomegaFailure(func() {
					expectKroReady(Default, cp, strings.TrimPrefix([]string{"v0.9.3", "v0.9.4"}[i%2], "v"))
				}); err != nil {
					waiting = append(waiting, err.Error())
					continue
				}
				readyAt[cp.Name] = time.Since(restarted)
			}
			g.Expect(waiting).To(BeEmpty(), "%d of %d Kros are not Ready", len(waiting), len(cps))
		})
		var after []time.Duration
		for _, d := range readyAt {
			after = append(after, d)
		}
		slices.Sort(after)
		row.note("all %d Ready, after the API server was back: the first %s, half of them %s, the last %s",
			len(cps), ms(after[0]), ms(after[(len(after)-1)/2]), ms(after[len(after)-1]))
		var forced []string
		Expect(fe.Platform.Client.List(suiteCtx, &hrs)).To(Succeed())
		for _, hr := range hrs.Items {
			if strings.HasPrefix(hr.Annotations[meta.ForceRequestAnnotation], flux.StuckReleasePrefix) {
				forced = append(forced, hr.Namespace)
			}
		}
		row.note("the provider forced %d HelmReleases that helm-controller left saying an install ran although it was deployed (fluxcd/helm-controller#1409)%s",
			len(forced), strings.Join(append([]string{""}, forced...), " "))
		row.converged(time.Since(restarted), "after the API server was back", time.Since(created), "after the Kros were created")
		deleteAndCheck(row, cps...)
	})
}
