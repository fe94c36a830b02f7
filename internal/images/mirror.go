package images

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

const (
	defaultMirror = "http://deb.debian.org/debian"
	defaultSuite  = "bookworm"
)

// HostMirror is the Debian archive the host's apt uses (so a machine without
// internet but with a local mirror builds from it), else deb.debian.org.
func HostMirror() string {
	files := []string{"/etc/apt/sources.list"}
	more, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	files = append(files, more...)
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		m := ParseMirror(io.LimitReader(fh, 1<<20), strings.HasSuffix(f, ".sources"))
		fh.Close()
		if m != "" {
			return m
		}
	}
	return defaultMirror
}

// ParseMirror finds the first Debian archive (not the security archive, nor
// another vendor's repository) in an apt sources file: one-line format, or
// deb822 when deb822 is true.
func ParseMirror(r io.Reader, deb822 bool) string {
	sc := bufio.NewScanner(r)
	var uris []string
	isDeb := true
	flush := func() string {
		defer func() { uris, isDeb = nil, true }()
		if !isDeb {
			return ""
		}
		for _, u := range uris {
			if debianArchive(u) {
				return u
			}
		}
		return ""
	}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			continue
		}
		if !deb822 {
			f := strings.Fields(line)
			if len(f) < 3 || f[0] != "deb" {
				continue
			}
			i := 1
			if strings.HasPrefix(f[i], "[") { // options: [arch=amd64 signed-by=...]
				for i < len(f) && !strings.HasSuffix(f[i], "]") {
					i++
				}
				i++
			}
			if i < len(f) && debianArchive(f[i]) {
				return strings.TrimSuffix(f[i], "/")
			}
			continue
		}
		if line == "" {
			if m := flush(); m != "" {
				return m
			}
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "types":
			isDeb = slices.Contains(strings.Fields(v), "deb")
		case "uris":
			for _, u := range strings.Fields(v) {
				uris = append(uris, strings.TrimSuffix(u, "/"))
			}
		}
	}
	if deb822 {
		return flush()
	}
	return ""
}

// debianArchive reports whether u looks like a Debian archive's root.
func debianArchive(u string) bool {
	u = strings.TrimSuffix(u, "/")
	return (strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "file:/")) &&
		strings.HasSuffix(u, "/debian")
}

// hostSuite is the host's Debian codename, when the host is Debian.
func hostSuite() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return defaultSuite
	}
	var id, code string
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, "=")
		v = strings.Trim(v, `"`)
		switch k {
		case "ID":
			id = v
		case "VERSION_CODENAME":
			code = v
		}
	}
	if id == "debian" && code != "" {
		return code
	}
	return defaultSuite
}
