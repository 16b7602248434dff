package crdschema

import (
	"math/rand/v2"
	"strconv"
	"strings"
)

// The generators below make the inputs that property tests feed the provider's pure
// status code: strings the provider receives from elsewhere (a reason, a message, an
// annotation) in any form, and names at the longest the API server lets them be.

// Text is a hostile string of up to n bytes, often n: letters, punctuation, newlines,
// runes of several bytes, and one byte in eight anything at all (invalid UTF-8 among it).
func Text(r *rand.Rand, n int) string {
	if r.IntN(3) > 0 {
		n = r.IntN(n + 1)
	}
	const ascii = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._+:,/ \t\n!@#$%^&*()[]{}<>?|\\\"'`~=;"
	multi := []rune("äöüßéèñçøåΩЖ中文日本語🙂\u200b\u202e")
	var b strings.Builder
	for b.Len() < n {
		switch r.IntN(8) {
		case 0:
			b.WriteByte(byte(r.IntN(256)))
		case 1, 2:
			b.WriteRune(multi[r.IntN(len(multi))])
		default:
			b.WriteByte(ascii[r.IntN(len(ascii))])
		}
	}
	return b.String()
}

// Name is a DNS-1123 subdomain of n characters (at most 253, at least 10), as the API
// server accepts for an object's name; distinct for distinct i.
func Name(r *rand.Rand, n, i int) string {
	const alnum = "abcdefghijklmnopqrstuvwxyz0123456789"
	isAlnum := func(c byte) bool { return strings.IndexByte(alnum, c) >= 0 }
	b := []byte("n" + strconv.Itoa(i) + "-")
	for len(b) < n-1 {
		if len(b) < n-2 && isAlnum(b[len(b)-1]) && r.IntN(12) == 0 {
			b = append(b, ".-"[r.IntN(2)])
			continue
		}
		b = append(b, alnum[r.IntN(len(alnum))])
	}
	return string(append(b, alnum[r.IntN(len(alnum))]))
}
