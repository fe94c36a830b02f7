package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/agents"
)

type entry struct {
	name, body string
	typ        byte
	mode       int64
	link       string
}

func tgz(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Linkname: e.link}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

func TestUntarPackage(t *testing.T) {
	good := []entry{{name: "package/bin/node", body: "ELF", typ: tar.TypeReg, mode: 0o755}, {name: "package/LICENSE", body: "MIT", typ: tar.TypeReg, mode: 0o644}}
	cases := map[string]struct {
		entries []entry
		wantErr string
	}{
		"a package's files land under the directory, executables stay executable": {entries: good},
		"a path climbing out of package/ is refused":                              {entries: []entry{{name: "package/../../etc/passwd", body: "x", typ: tar.TypeReg, mode: 0o644}}, wantErr: "outside package/"},
		"a file beside package/ is refused":                                       {entries: []entry{{name: "other/file", body: "x", typ: tar.TypeReg, mode: 0o644}}, wantErr: "outside package/"},
		"a symbolic link is refused":                                              {entries: []entry{{name: "package/bin/sh", typ: tar.TypeSymlink, link: "/bin/sh"}}, wantErr: "neither a file nor a directory"},
		"a hard link is refused":                                                  {entries: []entry{{name: "package/x", typ: tar.TypeLink, link: "package/LICENSE"}}, wantErr: "neither a file nor a directory"},
	}
	for name, c := range cases {
		dir := t.TempDir()
		err := untarPackage(bytes.NewReader(tgz(t, c.entries...)), dir)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: err = %v, want %q", name, err, c.wantErr)
			}
			if _, serr := os.Stat(filepath.Join(filepath.Dir(dir), "etc/passwd")); serr == nil {
				t.Errorf("%s: a file was written outside the directory", name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, e := range c.entries {
			p := filepath.Join(dir, strings.TrimPrefix(e.name, "package/"))
			b, err := os.ReadFile(p)
			st, serr := os.Stat(p)
			if err != nil || serr != nil || string(b) != e.body || (st.Mode()&0o111 != 0) != (e.mode&0o111 != 0) {
				t.Errorf("%s: %s = %q (%v), mode %v; want %q, mode %o", name, p, b, err, st.Mode(), e.body, e.mode)
			}
		}
	}
}

func TestFetchTarballChecksTheHashBeforeUnpacking(t *testing.T) {
	body := tgz(t, entry{name: "package/bin/node", body: "ELF", typ: tar.TypeReg, mode: 0o755})
	sum := sha512.Sum512(body)
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.Path)
		w.Write(body)
	}))
	defer srv.Close()

	cases := map[string]struct {
		integrity string
		wantErr   string
	}{
		"the pinned hash matches: unpacked":       {integrity: "sha512-" + base64.StdEncoding.EncodeToString(sum[:])},
		"another hash: refused, nothing unpacked": {integrity: "sha512-" + base64.StdEncoding.EncodeToString(make([]byte, 64)), wantErr: "refusing it"},
		"a weaker algorithm is not accepted":      {integrity: "sha1-AAAA", wantErr: "not sha512"},
	}
	for name, c := range cases {
		dir := t.TempDir()
		err := fetchTarball(context.Background(), srv.URL+"/", npmTarball{"@scope/node-x", "1.2.3", c.integrity}, dir)
		_, serr := os.Stat(filepath.Join(dir, "bin/node"))
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || serr == nil {
				t.Errorf("%s: err = %v, file present = %v", name, err, serr == nil)
			}
			continue
		}
		if err != nil || serr != nil {
			t.Errorf("%s: err = %v, stat %v", name, err, serr)
		}
	}
	if len(asked) == 0 || asked[0] != "/@scope/node-x/-/node-x-1.2.3.tgz" {
		t.Errorf("asked for %v, want the registry's tarball path", asked)
	}
}

func TestPinnedNodeAndNPMAreSHA512(t *testing.T) {
	for _, p := range []npmTarball{nodeTarball, npmCLI} {
		b64, ok := strings.CutPrefix(p.Integrity, "sha512-")
		raw, err := base64.StdEncoding.DecodeString(b64)
		if !ok || err != nil || len(raw) != sha512.Size || p.Version == "" {
			t.Errorf("%s@%s: integrity %q is not a sha512", p.Name, p.Version, p.Integrity)
		}
	}
}

func TestAgentPackagesAreTheProfilesPins(t *testing.T) {
	pkgs := AgentPackages()
	byName := map[string]AgentPackage{}
	for _, p := range pkgs {
		byName[p.Name] = p
	}
	n := 0
	for _, p := range agents.All() {
		if p.Package == "" {
			continue
		}
		n++
		got, ok := byName[p.Name]
		if !ok || got.Package != p.Package || got.Version != p.Version || got.Version == "" {
			t.Errorf("profile %s (%s@%s): image installs %+v", p.Name, p.Package, p.Version, got)
		}
	}
	if n == 0 || len(pkgs) != n {
		t.Errorf("%d npm profiles, %d packages to install", n, len(pkgs))
	}
	// The label the image carries reads back as the same versions.
	back := ParseAgentsLabel(agentsLabel(pkgs))
	for _, p := range pkgs {
		if back[p.Name] != p.Version {
			t.Errorf("label round trip: %s = %q, want %q", p.Name, back[p.Name], p.Version)
		}
	}
	if len(back) != len(pkgs) {
		t.Errorf("label round trip: %v", back)
	}
}
