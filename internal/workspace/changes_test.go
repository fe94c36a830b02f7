package workspace

import (
	"reflect"
	"testing"
)

func file(p, content string, mode uint32) Entry {
	return Entry{Path: p, Type: TypeFile, Size: int64(len(content)), SHA256: sum(content), Mode: mode}
}

func dir(p string) Entry { return Entry{Path: p, Type: TypeDir, Mode: 0o755} }

func manifest(es ...Entry) Manifest {
	m := Manifest{}
	for _, e := range es {
		m[e.Path] = e
	}
	return m
}

func kinds(cs []Change) map[string]Kind {
	out := map[string]Kind{}
	for _, c := range cs {
		out[c.Path] = c.Kind
	}
	return out
}

func TestCompare(t *testing.T) {
	before := manifest(file("same", "x", 0o644), file("mod", "a", 0o644), file("gone", "g", 0o644),
		file("chmod", "c", 0o644), file("touched", "t", 0o644), dir("d"))
	after := manifest(file("same", "x", 0o644), file("mod", "b", 0o644), file("chmod", "c", 0o755),
		file("touched", "t", 0o644), file("new", "n", 0o644), dir("d"), Entry{Path: "pipe", Type: TypeOther, Other: "fifo"})
	got := Compare(before, after, map[string]bool{"touched": true})
	want := map[string]Kind{"mod": Modified, "gone": Deleted, "chmod": ModeOnly, "touched": Reverted, "new": Created, "pipe": Created}
	if k := kinds(got); !reflect.DeepEqual(k, want) {
		t.Fatalf("Compare = %v, want %v", k, want)
	}
	for _, c := range got {
		if (c.Path == "pipe") != (c.Refused != "") {
			t.Errorf("%s: Refused = %q", c.Path, c.Refused)
		}
	}
}

func TestMergeUpper(t *testing.T) {
	base := manifest(file("a", "a", 0o644), dir("d"), file("d/x", "x", 0o644), file("d/y", "y", 0o644),
		dir("o"), file("o/old", "o", 0o644), dir("t"), file("t/in", "i", 0o644), file("keep", "k", 0o644))
	wh := func(p string) Entry { return Entry{Path: p, Type: TypeOther, Other: "char device 0:0"} }
	opq := dir("o")
	opq.Opaque = true
	upper := manifest(
		file("a", "a", 0o644), // copied up, same content: reverted
		dir("d"), wh("d/x"),   // merged dir, one file deleted
		opq, file("o/new", "n", 0o644), // opaque: o/old is gone
		file("t", "now a file", 0o644), // a file over a lower dir hides its contents
	)
	merged, touched := MergeUpper(base, upper)
	got := kinds(Compare(base, merged, touched))
	want := map[string]Kind{"a": Reverted, "d/x": Deleted, "o/old": Deleted, "o/new": Created, "t": Modified, "t/in": Deleted}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("changes = %v, want %v", got, want)
	}
}

func TestCounts(t *testing.T) {
	cs := []Change{{Kind: Created}, {Kind: Modified}, {Kind: Modified, Risks: []string{"x"}}, {Kind: Deleted}, {Kind: Reverted}}
	n := Count(cs)
	if n.String() != "2 modified, 1 created, 1 deleted" || n.Risky != 1 || n.Applicable() != 4 {
		t.Fatalf("Count = %+v (%s)", n, n)
	}
}
