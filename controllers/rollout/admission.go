package rollout

import (
	"encoding/json"
	"fmt"
	"slices"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// A rollout's decisions are made in the ProviderConfig's status, but they are recorded
// where they survive the loss of that status (a restore from a backup, a ProviderConfig
// deleted and created again by GitOps, a replica taking over with an older cache): on
// each Kro's own HelmRelease, which carries the revision it installs and, under a
// rollout, the admission to it and a failure with it. The Kro reconciler writes the
// record with the HelmRelease, in the same apply; the ProviderConfig reconciler reads
// the records back to rebuild its plan (planRollout), and the Kro reconciler to know the
// revision a Kro runs when its own status lost it.

// Record is what a HelmRelease records of its Kro's rollout.
type Record struct {
	// Revision is the revision of the version's artifacts the HelmRelease carries.
	Revision string
	// Admission is the rollout's admission of the Kro to Revision; nil: none (the Kro got
	// Revision without a rollout: a new Kro, a tenant's change of version, no policy).
	Admission *Admission
	// Failed says why the rollout counts the Kro as failed with Revision ("": it does not).
	Failed string
}

// Admission is a RolloutMember as a HelmRelease keeps it.
type Admission struct {
	Since       metav1.Time `json:"since"`
	RGDsReady   int32       `json:"rgdsReady,omitempty"`
	Unavailable bool        `json:"unavailable,omitempty"`
	// Instances is the instance baseline (rollout_health.go), taken after the admission.
	Instances *v1alpha1.InstanceCounts `json:"instances,omitempty"`
}

// ReadRecord reads a HelmRelease's record. An admission that cannot be read is left
// out: the Kro then counts as one that got the revision without a rollout.
func ReadRecord(hr *helmv2.HelmRelease) Record {
	a := hr.GetAnnotations()
	rec := Record{Revision: a[v1alpha1.AnnotationRevision], Failed: a[v1alpha1.AnnotationRolloutFailed]}
	if raw := a[v1alpha1.AnnotationRolloutAdmission]; raw != "" {
		adm := &Admission{}
		if json.Unmarshal([]byte(raw), adm) == nil && !adm.Since.IsZero() {
			rec.Admission = adm
		}
	}
	return rec
}

// Annotate puts the record on the HelmRelease about to be applied; what the record
// leaves out is not applied, so the apply removes it.
func (rec Record) Annotate(hr *helmv2.HelmRelease) error {
	if rec.Revision == "" {
		return nil
	}
	if hr.Annotations == nil {
		hr.Annotations = map[string]string{}
	}
	hr.Annotations[v1alpha1.AnnotationRevision] = rec.Revision
	if rec.Admission != nil {
		raw, err := json.Marshal(rec.Admission)
		if err != nil {
			return fmt.Errorf("recording the rollout's admission: %w", err)
		}
		hr.Annotations[v1alpha1.AnnotationRolloutAdmission] = string(raw)
	}
	if rec.Failed != "" {
		hr.Annotations[v1alpha1.AnnotationRolloutFailed] = rec.Failed
	}
	return nil
}

// member is the record's admission as the rollout member of the Kro with key kro.
func (rec Record) member(kro string) v1alpha1.RolloutMember {
	// The annotation is anyone's with access to the platform cluster: its failure
	// passes the door on its way into the status.
	m := v1alpha1.RolloutMember{Kro: kro, Reason: shortMessage(rec.Failed)}
	if rec.Admission != nil {
		m.Since, m.RGDsReady, m.Unavailable = rec.Admission.Since, rec.Admission.RGDsReady, rec.Admission.Unavailable
		m.Instances = rec.Admission.Instances.DeepCopy()
	}
	return m
}

// admittedTo: the HelmRelease carries the revision because a rollout admitted the Kro to
// it, and the rollout has not counted it as failed.
func (rec Record) admittedTo(revision string) bool {
	return rec.Revision == revision && rec.Admission != nil && rec.Failed == ""
}

// failedWith: the rollout counted the Kro as failed with the revision.
func (rec Record) failedWith(revision string) bool {
	return rec.Revision == revision && rec.Admission != nil && rec.Failed != ""
}

// RunningRevision is the revision a Kro runs: the one its HelmRelease records, or else
// the one it was last Ready with (a HelmRelease from before the record, or none).
func RunningRevision(k *v1alpha1.Kro, rec Record) string {
	if rec.Revision != "" {
		return rec.Revision
	}
	return k.Status.Revision
}

// NextRecord is the record the Kro's HelmRelease gets when it carries revision: the
// ProviderConfig's status says whether the rollout admitted the Kro or counted it as
// failed. Where the status knows nothing of the revision (it was lost, or not written
// yet), the HelmRelease's earlier record of the same revision is kept.
func NextRecord(pc *v1alpha1.ProviderConfig, version, revision, kro string, prev Record) Record {
	rec := Record{Revision: revision}
	is := func(m v1alpha1.RolloutMember) bool { return m.Kro == kro }
	for _, vs := range pc.Status.Versions {
		if vs.Version != version || vs.Revision != revision {
			continue
		}
		switch i, j := slices.IndexFunc(vs.Updating, is), slices.IndexFunc(vs.Failed, is); {
		case i >= 0:
			rec.Admission = admissionOf(vs.Updating[i])
			carryInstanceBaseline(rec.Admission, prev, revision)
		case j >= 0:
			rec.Admission, rec.Failed = admissionOf(vs.Failed[j]), vs.Failed[j].Reason
			carryInstanceBaseline(rec.Admission, prev, revision)
		case prev.Revision == revision:
			// Done with the revision (healthy, or given it while unavailable): the
			// admission stays on record, a failure does not, unless the status counts
			// failed Kros it does not list (FailedMore): this may be one of them. A Kro
			// Ready with the revision is done whatever its record says (members.of).
			rec.Admission = prev.Admission
			if vs.FailedMore > 0 {
				rec.Failed = prev.Failed
			}
		}
		return rec
	}
	if prev.Revision == revision {
		rec.Admission, rec.Failed = prev.Admission, prev.Failed
	}
	return rec
}

func admissionOf(m v1alpha1.RolloutMember) *Admission {
	return &Admission{Since: m.Since, RGDsReady: m.RGDsReady, Unavailable: m.Unavailable, Instances: m.Instances.DeepCopy()}
}
