// Package foreign is the one door for strings the provider did not write itself: a
// tenant's version or name, an RGD's or an instance's condition, a HelmRelease's message,
// an error from an API server. On their way into a label value, an object name, a
// condition's reason or message, an event or a status field, they pass one of these
// functions, which returns what the API server accepts for that target whatever it was
// given: the right characters, the right ends, at most the target's length. Lists in
// messages are capped too (List).
//
// Where the result names something (a label value, a name), a changed string carries a
// hash of the original, so that two different inputs never meet in one result.
package foreign

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Limits of the targets, as the API server enforces them.
const (
	// LabelValueMax is a label value's length.
	LabelValueMax = validation.LabelValueMaxLength
	// DNSLabelMax is the length of a name that must be a DNS-1123 label (a namespace, a Service).
	DNSLabelMax = validation.DNS1123LabelMaxLength
	// SubdomainMax is the length of a name that must be a DNS-1123 subdomain (most objects).
	SubdomainMax = validation.DNS1123SubdomainMaxLength
	// ConditionReasonMax is metav1.Condition's reason.
	ConditionReasonMax = 1024
	// ConditionMessageMax is metav1.Condition's message.
	ConditionMessageMax = 32768
	// EventNoteMax is an event's note (events.k8s.io/v1).
	EventNoteMax = 1024
	// EventReasonMax is an event's reason and action (events.k8s.io/v1).
	EventReasonMax = 128
	// ListFew is how many names List writes out by default.
	ListFew = 5
)

// Limits the provider sets itself on what a status carries, to keep it readable.
const (
	// StatusMessageMax is the length of a condition message the provider writes.
	StatusMessageMax = 512
	// StatusNamesMax is how many names a status message lists.
	StatusNamesMax = 10
)

// hashLen is the length of the hash a changed name or label value ends with.
const hashLen = 10

// Fallback is the reason given for a string that holds no letter to start one with.
const Fallback = "Unknown"

// LabelValue returns s when it is a valid label value. Otherwise every character a label
// value may not hold becomes '-', the ends are trimmed to letters and digits, and a hash
// of s is appended, all within LabelValueMax: "v0.9.4+mirror.1" becomes
// "v0.9.4-mirror.1-<hash>".
func LabelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	mapped := mapBytes(s, func(c byte) bool { return isAlnum(c) || c == '-' || c == '_' || c == '.' })
	return withHash(trimEnds(mapped, isAlnum), s, LabelValueMax)
}

// DNSLabel returns s when it is a DNS-1123 label of at most limit characters (limit at
// most DNSLabelMax). Otherwise it is lowercased, every other character becomes '-', and
// it is shortened with a hash of s.
func DNSLabel(s string, limit int) string {
	limit = min(limit, DNSLabelMax)
	if len(s) <= limit && len(validation.IsDNS1123Label(s)) == 0 {
		return s
	}
	mapped := mapBytes(strings.ToLower(s), func(c byte) bool { return isLowerAlnum(c) || c == '-' })
	return withHash(trimEnds(mapped, isLowerAlnum), s, limit)
}

// Subdomain returns s when it is a DNS-1123 subdomain of at most limit characters
// (limit at most SubdomainMax). Otherwise each dot-separated part is made a DNS-1123
// label, empty parts are dropped, and the result is shortened with a hash of s.
func Subdomain(s string, limit int) string {
	limit = min(limit, SubdomainMax)
	if len(s) <= limit && len(validation.IsDNS1123Subdomain(s)) == 0 {
		return s
	}
	var parts []string
	for _, p := range strings.Split(strings.ToLower(s), ".") {
		p = trimEnds(mapBytes(p, func(c byte) bool { return isLowerAlnum(c) || c == '-' }), isLowerAlnum)
		if p != "" {
			parts = append(parts, p)
		}
	}
	return withHash(strings.Join(parts, "."), s, limit)
}

// Reason returns a condition reason made of s: CamelCase letters, digits, '_', ',' and
// ':', starting with a letter and ending with a letter, digit or '_', at most limit
// characters. Every run of other characters is dropped and the letter after it is made
// upper case ("not ready: x" gives "NotReady:X"). A string without a letter gives
// Fallback.
func Reason(s string, limit int) string {
	var b strings.Builder
	upper := false
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf && (isAlnum(byte(r)) || r == '_' || r == ',' || r == ':'):
			if b.Len() == 0 && !isLetter(byte(r)) {
				continue // a reason starts with a letter
			}
			if upper {
				r = unicode.ToUpper(r)
			}
			b.WriteRune(r)
			upper = false
		default:
			upper = b.Len() > 0
		}
		if b.Len() >= limit {
			break
		}
	}
	out := strings.TrimRight(b.String(), ",:")
	if out == "" {
		return Fallback
	}
	return out
}

// Text returns s as valid UTF-8 of at most limit bytes; a longer one is cut at a
// character's boundary and ends with "...". It suits a condition's or event's message
// and any free-text status field, whose limits count characters (never more than bytes).
func Text(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= limit {
		return s
	}
	const more = "..."
	if limit <= len(more) {
		return more[:limit]
	}
	cut := limit - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}

// Middle returns s as Text of at most limit bytes, but a longer one keeps its start and
// its end with "..." between them: two long names that differ only at the end (a
// tenant's "team-a-...-1", "team-a-...-2") stay apart in a message that lists them.
func Middle(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	const more = "..."
	if len(s) <= limit || limit <= 2*len(more) {
		return Text(s, limit)
	}
	head := (limit - len(more)) / 2
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	tail := len(s) - (limit - len(more) - head)
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + more + s[tail:]
}

// Line returns the first line of s as Text: an error or a message from elsewhere, for
// a condition or an event.
func Line(s string, limit int) string {
	first, _, _ := strings.Cut(s, "\n")
	return Text(strings.TrimSpace(first), limit)
}

// List joins items for a message: at most few of them, then how many more there are
// ("a, b, c and 7 more"). Each item is what the caller made of it; the result is bounded
// only when the items are.
func List(items []string, few int) string { return JoinFew(items, few, ", ") }

// JoinFew is List with another separator, for items that hold commas themselves
// ("a: x; b: y; and 7 more").
func JoinFew(items []string, few int, sep string) string {
	if few < 1 {
		few = 1
	}
	if len(items) <= few {
		return strings.Join(items, sep)
	}
	last := " and "
	if sep != ", " {
		last = sep + "and "
	}
	return fmt.Sprintf("%s%s%d more", strings.Join(items[:few], sep), last, len(items)-few)
}

// mapBytes replaces every byte that keep refuses with '-' (a multi-byte character gives
// one '-').
func mapBytes(s string, keep func(byte) bool) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			_, size := utf8.DecodeRuneInString(s[i:])
			b = append(b, '-')
			i += size
			continue
		}
		if !keep(c) {
			c = '-'
		}
		b = append(b, c)
		i++
	}
	return string(b)
}

// trimEnds cuts from both ends of s what end refuses.
func trimEnds(s string, end func(byte) bool) string {
	for len(s) > 0 && !end(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && !end(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

// withHash is prefix, shortened so that "-" and a hash of original follow within limit;
// the hash alone when nothing of prefix is left. A cut prefix ends with a letter or digit.
func withHash(prefix, original string, limit int) string {
	sum := sha256.Sum256([]byte(original))
	hash := hex.EncodeToString(sum[:])[:hashLen]
	if room := limit - hashLen - 1; len(prefix) > room {
		prefix = prefix[:max(room, 0)]
	}
	for len(prefix) > 0 && !isAlnum(prefix[len(prefix)-1]) {
		prefix = prefix[:len(prefix)-1]
	}
	if prefix == "" {
		return hash
	}
	return prefix + "-" + hash
}

func isAlnum(c byte) bool      { return isLetter(c) || (c >= '0' && c <= '9') }
func isLetter(c byte) bool     { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }
func isLowerAlnum(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') }

// NamePart returns s for a part of a name that gets its uniqueness elsewhere (a digest
// beside it): lowercase letters, digits and '-', trimmed to letters and digits at both
// ends, at most limit characters, and no hash; "v" when nothing is left. Revision names
// are made of a version this way and must stay as they are across releases.
func NamePart(s string, limit int) string {
	out := trimEnds(mapBytes(strings.ToLower(s), func(c byte) bool { return isLowerAlnum(c) || c == '-' }), isLowerAlnum)
	if len(out) > limit {
		out = strings.TrimRight(out[:limit], "-")
	}
	if out == "" {
		out = "v"
	}
	return out
}
