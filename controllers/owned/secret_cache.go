package owned

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/openmcp-project/service-provider-kro/api/v1alpha1"
)

// annotationDataDigest holds, on a secret in a ControlPlane's cache only, the digest of
// the data that TrimSecretCopy dropped. The provider never writes it to a cluster.
const annotationDataDigest = v1alpha1.LabelPrefix + "cached-data-digest"

// maxOwnAnnotation bounds what TrimSecretCopy keeps of an annotation's value: longer than
// anything the provider writes (a namespace and a name, a secret's name, a time), so a
// value cut to it never equals a desired one and the copy is written anew.
const maxOwnAnnotation = 1024

// digestKey keys the data digests. It is drawn afresh in every process and never leaves
// it, so nobody can write a digest into a secret that matches the data it lacks.
var digestKey = func() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // never fails (crypto/rand panics rather)
	return k
}()

// dataDigest is a keyed digest of a secret's data: every key and value, in key order,
// each with its length so that no two different maps give the same input.
func dataDigest(data map[string][]byte) string {
	mac := hmac.New(sha256.New, digestKey)
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var n [8]byte
	for _, k := range keys {
		for _, part := range [][]byte{[]byte(k), data[k]} {
			binary.BigEndian.PutUint64(n[:], uint64(len(part)))
			mac.Write(n[:])
			mac.Write(part)
		}
	}
	return base64.RawStdEncoding.EncodeToString(mac.Sum(nil))
}

// digestOf is the digest of a secret's data: the one TrimSecretCopy kept of a secret
// without data, else that of its data. A kept digest is sealed to the very object it was
// made of (its UID and resourceVersion, sealDigest): whatever someone writes into a
// secret makes a new version, for which no digest they could copy or guess holds.
func digestOf(s *corev1.Secret) string {
	if v, ok := s.Annotations[annotationDataDigest]; ok && len(s.Data) == 0 {
		d, _, _ := strings.Cut(v, ".")
		if hmac.Equal([]byte(v), []byte(sealDigest(s, d))) {
			return d
		}
	}
	return dataDigest(s.Data)
}

// sealDigest is the value of annotationDataDigest for digest d of the data of s: d and a
// keyed tag of d, s's UID and s's resourceVersion.
func sealDigest(s *corev1.Secret, d string) string {
	mac := hmac.New(sha256.New, digestKey)
	for _, part := range []string{"sealed", string(s.UID), s.ResourceVersion, d} {
		mac.Write([]byte(part))
		mac.Write([]byte{0})
	}
	return d + "." + base64.RawStdEncoding.EncodeToString(mac.Sum(nil)[:12])
}

// TrimSecretCopy is the cache transform of the secrets a ControlPlane's cache holds (those
// carrying the provider's label in kro-system, its image pull secret copies). It keeps
// what the provider reads of a copy, and a digest of the data in place of the data (in an
// annotation that exists only in the cache, sealed to the object's version):
// CopySecret compares digests to see a copy that was changed. A tenant administers its
// ControlPlane and can make hundreds of such secrets of a MiB each; the cache keeps a few
// hundred bytes of each. Of the labels and annotations only the keys the provider reads
// stay, a value cut to maxOwnAnnotation; managedFields, finalizers and owner
// references go. It is idempotent, as the informer's watch-list applies it twice.
func TrimSecretCopy(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	annotations := keep(s.Annotations, ownAnnotations, maxOwnAnnotation)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[annotationDataDigest] = sealDigest(s, digestOf(s))
	return &corev1.Secret{
		TypeMeta: s.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion,
			CreationTimestamp: s.CreationTimestamp, DeletionTimestamp: s.DeletionTimestamp,
			Labels: keep(s.Labels, ownLabels, maxOwnAnnotation), Annotations: annotations,
		},
		Type: s.Type,
	}, nil
}

// ownLabels and ownAnnotations are the keys of a secret copy's labels and annotations
// that the provider reads (As, secretUpToDate, the kro credential's times).
var (
	ownLabels      = []string{v1alpha1.LabelManagedBy, v1alpha1.LabelProvider, v1alpha1.LabelKroName, v1alpha1.LabelKroNamespace, v1alpha1.LabelRole}
	ownAnnotations = []string{v1alpha1.AnnotationKro, v1alpha1.AnnotationSourceSecret, v1alpha1.AnnotationTokenIssued, v1alpha1.AnnotationTokenExpires}
)

// keep keeps of labels or annotations the keys named, each value cut to limit bytes (and
// copied, so that the cut holds nothing of the original's memory).
func keep(m map[string]string, keys []string, limit int) map[string]string {
	var out map[string]string
	for _, k := range keys {
		v, ok := m[k]
		if !ok {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = strings.Clone(v[:min(len(v), limit)])
	}
	return out
}
