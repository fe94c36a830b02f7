// Package native runs a sandbox on this kernel: user, mount, PID, IPC, UTS,
// network and cgroup namespaces around airlock's guest agent, with the
// filesystem view, Landlock rules, seccomp filter and limits it plans here.
package native

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/proto"
)

// Plan turns a spec into the guest's instructions. It reads the host's
// filesystem (to find host keys and sockets) but changes nothing.
func Plan(c *backend.Spec, env func(string) string) (*proto.Init, error) {
	if !filepath.IsAbs(c.Workspace) || filepath.Clean(c.Workspace) == "/" {
		return nil, fmt.Errorf("workspace must be an absolute directory other than /, got %q", c.Workspace)
	}
	home := backend.SandboxHome(c.HostHome)
	mounts := []proto.Mount{
		{Kind: proto.MountTmpfs, Target: "/tmp", Mode: 0o1777, SizeBytes: c.TmpBytes},
		{Kind: proto.MountTmpfs, Target: "/run", Mode: 0o755, SizeBytes: 16 << 20},
		{Kind: proto.MountDev, Target: "/dev"},
		{Kind: proto.MountProc, Target: "/proc"},
		// A fresh sysfs: the host's would list the host's network interfaces.
		// The host's cgroup tree stays visible (read-only) beneath it, as
		// tools read their limits there.
		{Kind: proto.MountSysfs, Target: "/sys"},
		{Kind: proto.MountBind, Source: "/sys/fs/cgroup", Target: "/sys/fs/cgroup", ReadOnly: true, Optional: true},
	}
	// /root is hidden unless it is (or holds) the workspace or the home, in
	// which case the read-only tmpfs over it still hides everything else.
	if home != "/root" {
		mounts = append(mounts, proto.Mount{Kind: proto.MountTmpfs, Target: "/root", Mode: 0o700, ReadOnly: true, SizeBytes: 64 << 10})
	}
	if c.Home != "" {
		mounts = append(mounts, proto.Mount{Kind: proto.MountBind, Source: c.Home, Target: home})
	} else {
		mounts = append(mounts, proto.Mount{Kind: proto.MountTmpfs, Target: home, Mode: 0o700, SizeBytes: c.TmpBytes})
	}
	for _, p := range c.RO {
		mounts = append(mounts, proto.Mount{Kind: proto.MountBind, Source: p, Target: p, ReadOnly: true})
	}
	for _, p := range c.RW {
		mounts = append(mounts, proto.Mount{Kind: proto.MountBind, Source: p, Target: p})
	}
	switch {
	case c.Overlay != nil:
		lower := c.Workspace
		if c.WorkspaceSource != "" {
			lower = c.WorkspaceSource
		}
		mounts = append(mounts, proto.Mount{Kind: proto.MountOverlay, Source: lower, Upper: c.Overlay.Upper, Work: c.Overlay.Work, Target: c.Workspace})
	case c.WorkspaceSource != "":
		mounts = append(mounts, proto.Mount{Kind: proto.MountBind, Source: c.WorkspaceSource, Target: c.Workspace})
	default:
		mounts = append(mounts, proto.Mount{Kind: proto.MountBind, Source: c.Workspace, Target: c.Workspace})
	}
	for _, b := range c.Binds {
		if !filepath.IsAbs(b.Target) || filepath.Clean(b.Target) == "/" {
			return nil, fmt.Errorf("mount target must be an absolute path other than /, got %q", b.Target)
		}
		mounts = append(mounts, proto.Mount{Kind: proto.MountBind, Source: b.Source, Target: filepath.Clean(b.Target), ReadOnly: b.ReadOnly})
	}
	for _, f := range c.Files {
		mounts = append(mounts, proto.Mount{Kind: proto.MountBind, Source: f.Source, Target: f.Target, ReadOnly: true})
	}
	// Parents before children, so a child's mountpoint can be made inside a
	// fresh tmpfs (a workspace under /tmp or under the hidden home).
	sort.SliceStable(mounts, func(i, j int) bool { return depth(mounts[i].Target) < depth(mounts[j].Target) })

	in := &proto.Init{
		Hostname: backend.Hostname(c.ID),
		Mounts:   mounts,
		Hide:     backend.Hidden(c, env),
		Workdir:  c.Workspace,
		Seccomp:  true,
		Relay:    c.Relay,
		Net:      c.Net,
		Landlock: backend.Landlock(c),
	}
	return in, nil
}

func depth(p string) int {
	p = filepath.Clean(p)
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}
