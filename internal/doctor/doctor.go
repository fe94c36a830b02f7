// Package doctor probes the kernel features airlock relies on and says what degrades without each.
package doctor

import (
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Status is how usable one feature is.
type Status string

// Statuses, from best to worst.
const (
	StatusOK       Status = "ok"
	StatusDegraded Status = "degraded" // usable, but something is not enforced or not verified
	StatusMissing  Status = "missing"
)

// Check names, also the rows of the table.
const (
	NameUserNS   = "user namespaces"
	NameMountAPI = "mount API"
	NameLandlock = "Landlock"
	NameSeccomp  = "seccomp"
	NameCgroups  = "cgroups"
	NameTun      = "/dev/net/tun"
	NameOverlay  = "overlayfs in userns"
	NameIDs      = "sandbox ids"
)

// required are the checks without which the native backend cannot start a sandbox at all.
var required = map[string]bool{NameUserNS: true, NameMountAPI: true, NameSeccomp: true}

// Check is one probed feature.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`           // what was found
	Impact string `json:"impact,omitempty"` // when not ok: what the user loses and what to do
}

// Report is everything `airlock doctor` prints.
type Report struct {
	Checks      []Check `json:"checks"`
	Kernel      string  `json:"kernel"`
	User        string  `json:"user"`
	NetworkMode string  `json:"network_mode"` // "transparent" (a TAP device into the gateway) or "proxy" (HTTP(S)_PROXY)
	NetworkWhy  string  `json:"network_why"`
}

// Run probes this kernel as the calling user. Every probe is bounded and leaves nothing
// behind: the namespace child is reaped and the trial cgroup removed.
func Run() Report {
	r, _ := RunFix(false)
	return r
}

// RunFix is Run that, with fix, first repairs what it can: as root, it
// reserves airlock's id range in /etc/subuid and /etc/subgid. fixed says
// what it changed.
func RunFix(fix bool) (_ Report, fixed []string) {
	kernel, ver := uname()
	r := Report{Kernel: kernel, User: whoami()}
	userns := probeUserNS()
	tun := probeTun()
	r.Checks = []Check{
		userns,
		probeMountAPI(),
		probeLandlock(),
		probeSeccomp(),
		probeCgroups(),
		tun,
		probeOverlay(ver, userns.Status != StatusMissing),
	}
	ids, did := probeIDs(fix)
	r.Checks = append(r.Checks, ids)
	fixed = append(fixed, did...)
	// The same rule as `airlock run --network-mode auto`: transparent
	// wherever the guest can make its TAP device.
	switch {
	case tun.Status == StatusOK && userns.Status != StatusMissing:
		r.NetworkMode, r.NetworkWhy = "transparent", "every packet goes through the gateway's network stack; any program works"
	case tun.Status != StatusOK:
		r.NetworkMode, r.NetworkWhy = "proxy", "no TAP device for this user ("+tun.Detail+"): traffic goes through the gateway's HTTP(S) proxy; tools that ignore HTTPS_PROXY get no network"
	default:
		r.NetworkMode, r.NetworkWhy = "proxy", "no user namespace, so no sandbox network of its own"
	}
	return r, fixed
}

// OK reports whether none of the required checks is missing.
func (r Report) OK() bool {
	for _, c := range r.Checks {
		if required[c.Name] && c.Status == StatusMissing {
			return false
		}
	}
	return true
}

// Write prints the report as an aligned table; color adds ANSI colors to the marks.
func (r Report) Write(w io.Writer, color bool) {
	fmt.Fprintf(w, "kernel  %s\nuser    %s\n\n", r.Kernel, r.User)
	width := 0
	for _, c := range r.Checks {
		width = max(width, len(c.Name))
	}
	indent := strings.Repeat(" ", 2+width+2)
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%s %-*s  %s\n", mark(c.Status, color), width, c.Name, c.Detail)
		if c.Status != StatusOK && c.Impact != "" {
			for _, line := range strings.Split(c.Impact, "\n") {
				fmt.Fprintf(w, "%s%s\n", indent, line)
			}
		}
	}
	fmt.Fprintf(w, "\nnetwork mode: %s", r.NetworkMode)
	if r.NetworkWhy != "" {
		fmt.Fprintf(w, " — %s", r.NetworkWhy)
	}
	fmt.Fprintln(w)
	if !r.OK() {
		fmt.Fprintln(w, "the native backend cannot run here: a required feature is missing")
	}
}

func mark(s Status, color bool) string {
	m, c := "✗", "31" // red
	switch s {
	case StatusOK:
		m, c = "✓", "32"
	case StatusDegraded:
		m, c = "!", "33"
	}
	if !color {
		return m
	}
	return "\x1b[" + c + "m" + m + "\x1b[0m"
}

// uname returns the kernel for display and its major.minor version for comparisons.
func uname() (string, [2]int) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown (" + err.Error() + ")", [2]int{}
	}
	rel, mach := unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Machine[:])
	return unix.ByteSliceToString(u.Sysname[:]) + " " + rel + " " + mach, parseVersion(rel)
}

// parseVersion reads "6.18.44-foo" as {6, 18}; anything unparsable is {0, 0}.
func parseVersion(rel string) [2]int {
	var v [2]int
	parts := strings.SplitN(rel, ".", 3)
	for i := 0; i < 2 && i < len(parts); i++ {
		digits := parts[i]
		if j := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
			digits = digits[:j]
		}
		n, err := strconv.Atoi(digits)
		if err != nil {
			return [2]int{}
		}
		v[i] = n
	}
	return v
}

func atLeast(v [2]int, major, minor int) bool {
	return v[0] > major || v[0] == major && v[1] >= minor
}

func whoami() string {
	uid, gid := os.Geteuid(), os.Getegid()
	name := "?"
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		name = u.Username
	}
	return fmt.Sprintf("%s (uid %d, gid %d)", name, uid, gid)
}
