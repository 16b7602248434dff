package foreign

import (
	"math/rand"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// reasonPattern is metav1.Condition's reason, as the API server validates it.
var reasonPattern = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// Hostile is a set of strings no target accepts as they are, plus random ones from seed:
// what the property tests here and against an API server feed every function.
func Hostile(seed int64, random int) []string {
	out := []string{
		"", "-", ".", "_", "+", ":", ",", "...", "-.-", "a..b", ".a.", "a.-b", "A", "9",
		"v0.9.4+mirror.1", "v1.0.0-rc.1+build.7", "1.2.3", "Ready", "not ready: x",
		"Pending,Waiting:", "name with spaces", "UPPER.case-Name", "ümlaut", "日本語のリーズン",
		"\x00\x01\x7f", "\xff\xfe invalid utf-8", "line one\nline two", "tab\there",
		strings.Repeat("a", 300), strings.Repeat("ä", 300), strings.Repeat("-", 100),
		strings.Repeat("a.", 200), strings.Repeat("reason ", 200), strings.Repeat("x", 40000),
	}
	r := rand.New(rand.NewSource(seed))
	alphabets := []string{
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
		"-._+:,/ \t\n!@#$%^&*()[]{}<>?|\\\"'`~=;",
		"äöüßéèñçøåΩЖ中文日本語🙂",
	}
	for i := 0; i < random; i++ {
		n := r.Intn(600)
		if r.Intn(10) == 0 {
			n = r.Intn(3000)
		}
		var b strings.Builder
		for b.Len() < n {
			// One byte in eight is anything at all, valid UTF-8 or not; the others are
			// letters and digits (half), punctuation or non-ASCII letters.
			a := r.Intn(8)
			if a == 0 {
				b.WriteByte(byte(r.Intn(256)))
				continue
			}
			alphabet := []rune(alphabets[0])
			if a <= 3 {
				alphabet = []rune(alphabets[a-1])
			}
			b.WriteRune(alphabet[r.Intn(len(alphabet))])
		}
		out = append(out, b.String())
	}
	return out
}

func TestEveryResultIsValidForItsTarget(t *testing.T) {
	for _, s := range Hostile(1, 2000) {
		if v := LabelValue(s); len(validation.IsValidLabelValue(v)) != 0 {
			t.Errorf("LabelValue(%q) = %q: %v", s, v, validation.IsValidLabelValue(v))
		}
		if v := DNSLabel(s, DNSLabelMax); len(validation.IsDNS1123Label(v)) != 0 {
			t.Errorf("DNSLabel(%q) = %q: %v", s, v, validation.IsDNS1123Label(v))
		}
		if v := DNSLabel(s, 20); len(v) > 20 || len(validation.IsDNS1123Label(v)) != 0 {
			t.Errorf("DNSLabel(%q, 20) = %q", s, v)
		}
		if v := Subdomain(s, SubdomainMax); len(validation.IsDNS1123Subdomain(v)) != 0 {
			t.Errorf("Subdomain(%q) = %q: %v", s, v, validation.IsDNS1123Subdomain(v))
		}
		for _, limit := range []int{128, ConditionReasonMax} {
			if v := Reason(s, limit); len(v) > limit || !reasonPattern.MatchString(v) {
				t.Errorf("Reason(%q, %d) = %q", s, limit, v)
			}
		}
		for _, limit := range []int{2, 10, 512, EventNoteMax} {
			if v := Text(s, limit); len(v) > limit || !utf8.ValidString(v) {
				t.Errorf("Text(%q, %d) = %q", s, limit, v)
			}
			if v := Line(s, limit); len(v) > limit || !utf8.ValidString(v) || strings.Contains(v, "\n") {
				t.Errorf("Line(%q, %d) = %q", s, limit, v)
			}
		}
	}
}

func TestValidStringsPassUnchanged(t *testing.T) {
	for _, s := range []string{"v0.9.4", "kro-system", "a.b-c_d", strings.Repeat("a", 63)} {
		if got := LabelValue(s); got != s {
			t.Errorf("LabelValue(%q) = %q, want it unchanged", s, got)
		}
	}
	if got := Subdomain("kro.run", 253); got != "kro.run" {
		t.Errorf("Subdomain(kro.run) = %q", got)
	}
	if got := DNSLabel("tenant-1", 63); got != "tenant-1" {
		t.Errorf("DNSLabel(tenant-1) = %q", got)
	}
	if got := Reason("ReconcileSuccess", 128); got != "ReconcileSuccess" {
		t.Errorf("Reason(ReconcileSuccess) = %q", got)
	}
	if got := Text("short", 512); got != "short" {
		t.Errorf("Text(short) = %q", got)
	}
}

func TestChangedNamesStayApart(t *testing.T) {
	// Two inputs that map to the same characters must not meet in one label value or name.
	pairs := [][2]string{{"v0.9.4+a", "v0.9.4-a"}, {"v1+x", "v1_x"}, {strings.Repeat("a", 70) + "1", strings.Repeat("a", 70) + "2"}}
	for _, p := range pairs {
		if LabelValue(p[0]) == LabelValue(p[1]) {
			t.Errorf("LabelValue(%q) == LabelValue(%q) = %q", p[0], p[1], LabelValue(p[0]))
		}
		if Subdomain(p[0], 40) == Subdomain(p[1], 40) {
			t.Errorf("Subdomain(%q) == Subdomain(%q)", p[0], p[1])
		}
	}
	if got := LabelValue("v0.9.4+mirror.1"); !strings.HasPrefix(got, "v0.9.4-mirror.1-") {
		t.Errorf("LabelValue(v0.9.4+mirror.1) = %q, want it readable with a hash", got)
	}
}

func TestReasonReadsAsCamelCase(t *testing.T) {
	for in, want := range map[string]string{
		"not ready: x":      "notReady:X",
		"Waiting for deps":  "WaitingForDeps",
		"  42 errors found": "errorsFound",
		"":                  Fallback,
		"123 ---":           Fallback,
		"Failed,":           "Failed",
	} {
		if got := Reason(in, 128); got != want {
			t.Errorf("Reason(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestListCapsTheNames(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e", "f", "g"}
	if got := List(names, 3); got != "a, b, c and 4 more" {
		t.Errorf("List = %q", got)
	}
	if got := List(names[:2], 3); got != "a, b" {
		t.Errorf("List = %q", got)
	}
}

func FuzzLabelValueAndReason(f *testing.F) {
	for _, s := range Hostile(2, 0) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v := LabelValue(s); len(validation.IsValidLabelValue(v)) != 0 {
			t.Fatalf("LabelValue(%q) = %q", s, v)
		}
		if v := Subdomain(s, SubdomainMax); len(validation.IsDNS1123Subdomain(v)) != 0 {
			t.Fatalf("Subdomain(%q) = %q", s, v)
		}
		if v := Reason(s, 128); !reasonPattern.MatchString(v) || len(v) > 128 {
			t.Fatalf("Reason(%q) = %q", s, v)
		}
	})
}

// TestMiddleKeepsBothEnds: a long name keeps its start and its end, within the limit,
// as valid UTF-8, whatever it was given.
func TestMiddleKeepsBothEnds(t *testing.T) {
	if got := Middle("ns/"+strings.Repeat("a", 200)+"-17", 20); got != "ns/aaaaa...aaaaaa-17" {
		t.Errorf("Middle kept %q", got)
	}
	if got := Middle("short", 20); got != "short" {
		t.Errorf("Middle changed a short string: %q", got)
	}
	for _, s := range Hostile(7, 300) {
		for _, limit := range []int{0, 3, 7, 20, 64, 511} {
			got := Middle(s, limit)
			if len(got) > limit || !utf8.ValidString(got) {
				t.Errorf("Middle(%.40q, %d) = %q: %d bytes, valid UTF-8 %t", s, limit, got, len(got), utf8.ValidString(got))
			}
		}
	}
}
