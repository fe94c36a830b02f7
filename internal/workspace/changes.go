package workspace

import (
	"fmt"
	"sort"
	"strings"
)

// Kind is what happened to a path.
type Kind string

const (
	Created  Kind = "created"
	Modified Kind = "modified"
	Deleted  Kind = "deleted"
	ModeOnly Kind = "mode"     // same content, other permission bits
	Reverted Kind = "reverted" // written, then restored to what it was: nothing to apply, but it was read and rewritten
)

// Change is one path that differs between two trees. Before is nil for a
// created path, After for a deleted one.
type Change struct {
	Path   string `json:"path"`
	Kind   Kind   `json:"kind"`
	Before *Entry `json:"before,omitempty"`
	After  *Entry `json:"after,omitempty"`
	// Refused says why the change can never be applied (a device, a fifo, an
	// unreadable file).
	Refused string `json:"refused,omitempty"`
	// Risks are the audit's findings on this change; a change with any is
	// applied only on an explicit yes.
	Risks []string `json:"risks,omitempty"`
}

// Risky reports whether the audit flagged c.
func (c Change) Risky() bool { return len(c.Risks) > 0 }

// Applicable reports whether apply has something to do for c.
func (c Change) Applicable() bool { return c.Kind != Reverted && c.Refused == "" }

// Compare lists what differs from before to after, in path order. touched
// names paths known to have been written (an overlay's copied-up files, a
// copy's files with new timestamps): those unchanged are reported Reverted.
func Compare(before, after Manifest, touched map[string]bool) []Change {
	var out []Change
	for p, a := range after {
		a := a
		b, ok := before[p]
		switch {
		case !ok:
			out = append(out, Change{Path: p, Kind: Created, After: &a})
		case !sameContent(b, a):
			b := b
			out = append(out, Change{Path: p, Kind: Modified, Before: &b, After: &a})
		case b.Mode != a.Mode && a.Type != TypeSymlink:
			b := b
			out = append(out, Change{Path: p, Kind: ModeOnly, Before: &b, After: &a})
		case touched[p] && a.Type != TypeDir:
			b := b
			out = append(out, Change{Path: p, Kind: Reverted, Before: &b, After: &a})
		}
	}
	for p, b := range before {
		if _, ok := after[p]; !ok {
			b := b
			out = append(out, Change{Path: p, Kind: Deleted, Before: &b})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	for i := range out {
		out[i].Refused = refusal(out[i])
	}
	return out
}

func refusal(c Change) string {
	if c.After == nil {
		return ""
	}
	switch {
	case c.After.Type == TypeOther:
		return fmt.Sprintf("is a %s: airlock never applies devices, fifos or sockets", c.After.Other)
	case c.After.Unreadable != "":
		return "could not be read: " + c.After.Unreadable
	case c.After.Type == TypeFile && c.After.SHA256 == "":
		return "was not hashed"
	}
	return ""
}

// MergeUpper returns the tree an overlay shows: base (the lower layer, as it
// was at start) with upper's entries over it. A whiteout deletes a path and
// what lies below it; an opaque directory, or a non-directory over a lower
// directory, hides the lower entries below it. touched gets every
// non-directory in upper (copied up or created).
func MergeUpper(base, upper Manifest) (merged Manifest, touched map[string]bool) {
	merged = make(Manifest, len(base)+len(upper))
	for p, e := range base {
		merged[p] = e
	}
	touched = map[string]bool{}
	hidden := map[string]bool{} // dirs whose lower contents are gone
	for _, u := range upper {
		switch {
		case u.Whiteout():
			delete(merged, u.Path)
			hidden[u.Path] = true
			touched[u.Path] = true
		case u.Type == TypeDir:
			if b, ok := base[u.Path]; !ok || b.Type != TypeDir || u.Opaque {
				hidden[u.Path] = true
			}
			merged[u.Path] = u
		default:
			hidden[u.Path] = true
			merged[u.Path] = u
			touched[u.Path] = true
		}
	}
	if len(hidden) > 0 {
		for p := range base {
			if _, fromUpper := upper[p]; fromUpper {
				continue
			}
			for d := parent(p); ; d = parent(d) {
				if hidden[d] {
					delete(merged, p)
					break
				}
				if d == "" {
					break
				}
			}
		}
	}
	return merged, touched
}

// Counts summarises a change set.
type Counts struct {
	Created, Modified, Deleted, Mode, Reverted, Risky, Refused int
}

// Count tallies changes.
func Count(cs []Change) Counts {
	var n Counts
	for _, c := range cs {
		switch c.Kind {
		case Created:
			n.Created++
		case Modified:
			n.Modified++
		case Deleted:
			n.Deleted++
		case ModeOnly:
			n.Mode++
		case Reverted:
			n.Reverted++
		}
		if c.Risky() {
			n.Risky++
		}
		if c.Refused != "" {
			n.Refused++
		}
	}
	return n
}

// Applicable is how many changes an apply would carry out.
func (n Counts) Applicable() int { return n.Created + n.Modified + n.Deleted + n.Mode - n.Refused }

// String reads "12 modified, 3 created, 1 deleted".
func (n Counts) String() string {
	var parts []string
	add := func(k int, what string) {
		if k > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", k, what))
		}
	}
	add(n.Modified, "modified")
	add(n.Created, "created")
	add(n.Deleted, "deleted")
	add(n.Mode, "mode-changed")
	if len(parts) == 0 {
		return "no changes"
	}
	return strings.Join(parts, ", ")
}
