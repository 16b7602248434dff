package env

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// PrintKros writes every Kro on the onboarding cluster the way `kubectl get kro -A`
// shows them, followed by each one's conditions.
func PrintKros(ctx context.Context, onboarding client.Client, w io.Writer) error {
	var list v1alpha1.KroList
	if err := onboarding.List(ctx, &list); err != nil {
		return fmt.Errorf("listing Kros: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tVERSION\tPHASE\tREADY\tRGDS\tRGDS READY\tCHART\tAGE")
	for _, k := range list.Items {
		ready := "Unknown"
		if c := apimeta.FindStatusCondition(k.Status.Conditions, v1alpha1.ConditionReady); c != nil {
			ready = string(c.Status)
		}
		total, readyRGDs := "", ""
		if s := k.Status.ResourceGraphDefinitions; s != nil {
			total, readyRGDs = fmt.Sprint(s.Total), fmt.Sprint(s.Ready)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.Namespace, k.Name, k.Spec.Version, k.Status.Phase,
			ready, total, readyRGDs, k.Status.ChartVersion, age(k.CreationTimestamp))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, k := range list.Items {
		fmt.Fprintf(w, "\n%s/%s conditions:\n", k.Namespace, k.Name)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, c := range k.Status.Conditions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, oneLine(c.Message))
		}
		_ = tw.Flush()
	}
	return nil
}

func age(t metav1.Time) string {
	if t.IsZero() {
		return ""
	}
	d := time.Since(t.Time)
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	default:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}
