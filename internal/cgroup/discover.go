package cgroup

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// controllers are the ones airlock limits, in the order groups are built.
var controllers = []string{"memory", "cpu", "pids"}

// mount is one cgroup filesystem mount from /proc/self/mountinfo.
type mount struct {
	point string          // where it is mounted
	root  string          // which cgroup of its hierarchy is the mount's root
	v2    bool            // cgroup2 rather than a v1 hierarchy
	ctrls map[string]bool // v1 controllers bound to this hierarchy
}

// layout is where the calling process's own cgroups live.
type layout struct {
	v1      map[string]string // v1 controller -> the caller's cgroup dir in that hierarchy
	v2      string            // the caller's cgroup2 dir, "" when no cgroup2 mount shows it
	missing map[string]string // v1 controller -> why it has no dir
	v2Why   string            // why v2 is "", if it is
	roots   map[string]bool   // mount points: hierarchy roots, never removed
	own     []string          // the caller's cgroup dir in every hierarchy, never removed
}

// discover reads the caller's cgroup layout from procfs.
func discover() (layout, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return layout{}, fmt.Errorf("cgroup: read mountinfo: %w", err)
	}
	pc, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return layout{}, fmt.Errorf("cgroup: read /proc/self/cgroup: %w", err)
	}
	return buildLayout(parseMountinfo(mi), pc), nil
}

func buildLayout(mounts []mount, procCgroup []byte) layout {
	lay := layout{
		v1:      map[string]string{},
		missing: map[string]string{},
		roots:   map[string]bool{},
	}
	for _, m := range mounts {
		lay.roots[m.point] = true
	}
	v1, v2, hasV2 := parseProcCgroup(procCgroup)
	for c, p := range v1 {
		if dir, err := resolve(mounts, p, func(m mount) bool { return !m.v2 && m.ctrls[c] }); err == nil && !slices.Contains(lay.own, dir) {
			lay.own = append(lay.own, dir)
		}
	}
	for _, c := range controllers {
		p, ok := v1[c]
		if !ok {
			lay.missing[c] = "no cgroup v1 hierarchy with this controller"
			continue
		}
		dir, err := resolve(mounts, p, func(m mount) bool { return !m.v2 && m.ctrls[c] })
		if err != nil {
			lay.missing[c] = err.Error()
			continue
		}
		lay.v1[c] = dir
	}
	if !hasV2 {
		lay.v2Why = "no cgroup2 entry in /proc/self/cgroup"
	} else if dir, err := resolve(mounts, v2, func(m mount) bool { return m.v2 }); err != nil {
		lay.v2Why = err.Error()
	} else {
		lay.v2 = dir
		lay.own = append(lay.own, dir)
	}
	return lay
}

// version picks the hierarchy to use: v2 when it offers any of our controllers (a controller is
// bound to v1 or v2, never both), else v1 when it has any, else v2 so the caller learns why not.
func (lay layout) version() int {
	if lay.v2 != "" {
		avail := readFields(filepath.Join(lay.v2, "cgroup.controllers"))
		for _, c := range controllers {
			if avail[c] {
				return 2
			}
		}
	}
	if len(lay.v1) > 0 {
		return 1
	}
	if lay.v2 != "" {
		return 2
	}
	return 0
}

// parseMountinfo returns the cgroup and cgroup2 mounts (proc(5) format).
func parseMountinfo(data []byte) []mount {
	var out []mount
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// Optional fields end at "-"; fstype, source and super options follow it.
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(f) || len(f) < 5 {
			continue
		}
		m := mount{root: unescape(f[3]), point: unescape(f[4])}
		switch f[sep+1] {
		case "cgroup2":
			m.v2 = true
		case "cgroup":
			m.ctrls = map[string]bool{}
			for _, o := range strings.Split(f[sep+3], ",") {
				m.ctrls[o] = true
			}
		default:
			continue
		}
		out = append(out, m)
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for space and so on).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1:i+4]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < '0' || s[i] > '7' {
			return false
		}
	}
	return s[0] <= '3'
}

// parseProcCgroup splits /proc/self/cgroup into v1 paths by controller and the v2 path.
func parseProcCgroup(data []byte) (v1 map[string]string, v2 string, hasV2 bool) {
	v1 = map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2, hasV2 = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c != "" {
				v1[c] = parts[2]
			}
		}
	}
	return v1, v2, hasV2
}

// cleanCgPath validates a cgroup path from /proc/self/cgroup. A ".." appears when the cgroup
// lies outside our cgroup namespace; such a path cannot be reached through our mounts.
func cleanCgPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("cgroup: path %q is not absolute", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("cgroup: path %q leaves the cgroup namespace", p)
		}
	}
	return filepath.Clean(p), nil
}

// resolve maps a cgroup path onto the filesystem through the mount whose root contains it
// (containers often bind-mount a sub-tree, so the mount root is not always "/").
func resolve(mounts []mount, cgPath string, want func(mount) bool) (string, error) {
	p, err := cleanCgPath(cgPath)
	if err != nil {
		return "", err
	}
	best := -1
	for i, m := range mounts {
		if !want(m) || !within(p, m.root) {
			continue
		}
		if best < 0 || len(m.root) > len(mounts[best].root) {
			best = i
		}
	}
	if best < 0 {
		return "", fmt.Errorf("cgroup: %s is not visible under any mount", p)
	}
	rel := strings.TrimPrefix(p, mounts[best].root)
	return filepath.Join(mounts[best].point, rel), nil
}

// within reports whether path p equals root or lies below it.
func within(p, root string) bool {
	return root == "/" || p == root || strings.HasPrefix(p, root+"/")
}
