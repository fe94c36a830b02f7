package policy

import (
	"strings"

	"golang.org/x/net/publicsuffix"
)

// SpansPublicSuffix reports whether the pattern *.name would cover names
// that different people register: name is a public suffix (com, co.uk),
// or one of the Public Suffix List's private section (workers.dev,
// github.io, s3.amazonaws.com), where anyone can host, or its children are
// suffixes themselves (a wildcard entry of the list). name is normalized
// (see NormalizeName). A single-label name the list does not know (corp,
// internal, test) is a private network's, not a registry's: false.
func SpansPublicSuffix(name string) bool {
	child := "airlock-probe." + name // the list decides for a child of name
	ps, icann := publicsuffix.PublicSuffix(child)
	if !icann && !strings.Contains(ps, ".") {
		return false // the list's default rule: a TLD it does not know
	}
	// The child is registrable on its own, or is itself a suffix: the
	// siblings *.name covers belong to different people.
	return ps == child || ps == name
}

// broadWildcard is New's refusal of an allow rule over a public suffix.
func broadWildcard(r hostRule) error {
	if r.kind != kindPattern || !SpansPublicSuffix(r.name) {
		return nil
	}
	return &suffixError{name: r.name}
}

type suffixError struct{ name string }

func (e *suffixError) Error() string {
	return "*." + e.name + " would allow every name under " + e.name + ", a public suffix (Public Suffix List) under which anyone can register or host one; allow the names you need, such as example." + e.name
}
