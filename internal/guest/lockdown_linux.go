package guest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"

	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/seccomp"
	"github.com/airlock-dev/airlock/internal/trace"
)

// lockDown runs after pivot_root, in this order: Landlock (needs the final
// paths), capabilities dropped, seccomp last — as close to serving as possible,
// so the filter never has to allow what setup needed.
func lockDown(in *proto.Init, r *reaper) (warnings []string, err error) {
	for _, r := range in.Rlimits {
		if r.Resource == unix.RLIMIT_DATA {
			// The limit binds this process too (commands inherit it, and
			// may not raise it): below what the guest's own runtime already
			// maps, the guest could not grow and would die instead of the
			// command failing its allocation. Give the guest its headroom.
			if floor := guestDataFloor(); r.Cur < floor {
				warnings = append(warnings, fmt.Sprintf("--memory %d MiB is below what the sandbox's own runtime needs without a cgroup: the per-process limit is %d MiB", r.Cur>>20, floor>>20))
				r.Cur, r.Max = floor, floor
			}
		}
		if err := unix.Setrlimit(r.Resource, &unix.Rlimit{Cur: r.Cur, Max: r.Max}); err != nil {
			return nil, step(fmt.Sprintf("setrlimit %d", r.Resource), err)
		}
	}
	if in.Landlock.Enabled {
		// A VM's kernel is the image's, not the user's to upgrade: its
		// Landlock ABI is a known quantity, not news at every start.
		w, err := applyLandlock(in.Landlock, in.VM == nil)
		if err != nil {
			return nil, step("landlock", err)
		}
		warnings = append(warnings, w...)
	}
	trace.Mark("lockdown: landlock")
	if err := r.startSpawner(); err != nil {
		return nil, step("drop capabilities", err)
	}
	if in.Contained && !in.Unplug {
		// The runtime dropped every capability (cap-drop ALL) and set
		// no_new_privs; locking securebits would need CAP_SETPCAP, so the
		// guest checks that nothing is left instead. The bounding set
		// matters most: the container may run as uid 0 (a workspace of
		// root's), and only its being empty keeps an execve as root from
		// filling the permitted set.
		if err := checkNoCapabilities(); err != nil {
			return nil, step("check capabilities", err)
		}
	} else if err := dropCapabilities(); err != nil {
		return nil, step("drop capabilities", err)
	} else if in.Unplug {
		// What the Pod's runtime gave for the lockdown is gone: the
		// permitted set everywhere and, on the thread that starts every
		// command, the bounding set. Check it as for any container.
		if err := checkNoPermitted(); err != nil {
			return nil, step("check capabilities", err)
		}
	}
	trace.Mark("lockdown: capabilities dropped")
	// Not dumpable: the sandboxed processes run as our uid, and must not be
	// able to open /proc/1/mem or attach to the agent that serves the host.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, step("set non-dumpable", err)
	}
	if in.Seccomp {
		if err := seccomp.Install(); err != nil {
			return nil, step("seccomp", err)
		}
	}
	return warnings, nil
}

func applyLandlock(l proto.Landlock, reportABI bool) ([]string, error) {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		if l.Required {
			return nil, fmt.Errorf("the kernel has no Landlock (needs Linux 5.13+ with CONFIG_SECURITY_LANDLOCK and lsm=landlock)")
		}
		return []string{"Landlock is not available on this kernel: writes are confined by read-only mounts only, and --no-delete cannot be enforced"}, nil
	}
	// Filesystem rights and IPC scopes only: network rights would refuse every
	// TCP bind/connect, and the sandbox's network is confined by its namespace.
	full := landlock.V11
	scoped := full.Scoped
	if abi < 8 {
		// Before ABI 8 there is no TSYNC: each thread restricts itself and
		// lands in a sibling domain, so a signal scope would stop the guest
		// from signalling the processes its spawner thread forked.
		scoped &^= landlock.ScopedSet(llsys.ScopeSignal)
	}
	cfg, err := landlock.NewConfig(full.HandledAccessFS, scoped)
	if err != nil {
		return nil, err
	}
	remove := landlock.AccessFSSet(llsys.AccessFSRemoveFile | llsys.AccessFSRemoveDir)
	rw := landlock.RWDirs(l.RWDirs...).IgnoreIfMissing().WithIoctlDev()
	if abi >= 2 {
		// Moving or linking a file from one writable directory to another
		// (git's receive-pack moves its quarantined objects so): both ends
		// are writable anyway. Not on ABI 1, where asking for it would
		// drop Landlock whole.
		rw = rw.WithRefer()
	}
	rules := []landlock.Rule{
		landlock.RODirs("/"),
		rw,
		landlock.RWFiles(l.RWFiles...).IgnoreIfMissing().WithIoctlDev(),
	}
	if len(l.NoDelete) > 0 {
		// No remove right, and no refer (which would allow renaming a file away).
		all := full.HandledAccessFS &^ remove &^ landlock.AccessFSSet(llsys.AccessFSRefer)
		rules = append(rules, landlock.PathAccess(all, l.NoDelete...))
	}
	var warnings []string
	if abi < 5 && reportABI {
		warnings = append(warnings, fmt.Sprintf("Landlock ABI %d: some restrictions (truncate, device ioctl, IPC scopes) are not enforced", abi))
	}
	return warnings, cfg.BestEffort().Restrict(rules...)
}

// dropCapabilities empties the permitted, effective, inheritable and ambient
// sets on every thread and locks the securebits, so nothing started afterwards
// — even as uid 0 inside — can hold or regain a capability. (The bounding set
// is emptied on the spawner thread: see runSpawner.) Each call below runs
// on every thread, one round of signals each: the ambient set needs none of
// its own, as capset drops from it whatever is no longer both permitted and
// inheritable (capabilities(7)), which with both empty is everything, and
// the locked NO_CAP_AMBIENT_RAISE bit keeps it empty.
func dropCapabilities() error {
	// linux/securebits.h: NOROOT, NO_SETUID_FIXUP, KEEP_CAPS (off), NO_CAP_AMBIENT_RAISE, each locked.
	const (
		noRoot, noRootLocked             = 1 << 0, 1 << 1
		noSetuidFixup, noSetuidFixupLock = 1 << 2, 1 << 3
		keepCapsLocked                   = 1 << 5
		noAmbientRaise, noAmbientLocked  = 1 << 6, 1 << 7
		secure                           = noRoot | noRootLocked | noSetuidFixup | noSetuidFixupLock | keepCapsLocked | noAmbientRaise | noAmbientLocked
	)
	if _, _, e := psx.Syscall6(syscall.SYS_PRCTL, unix.PR_SET_SECUREBITS, secure, 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("securebits: %w", e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if _, _, e := psx.Syscall6(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("capset: %w", e)
	}
	return nil
}

// checkNoCapabilities fails unless the permitted, effective, inheritable,
// ambient and bounding sets are empty.
func checkNoCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, d := range data {
		if d.Permitted|d.Effective|d.Inheritable != 0 {
			return fmt.Errorf("the guest holds capabilities (permitted %#x, effective %#x): the container must drop them all", d.Permitted, d.Effective)
		}
	}
	for c := 0; c <= LastCap(); c++ {
		if on, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, uintptr(c), 0, 0); err == nil && on != 0 {
			return fmt.Errorf("ambient capability %d is set", c)
		}
		if in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && in != 0 {
			return fmt.Errorf("capability %d is in the bounding set: the container must drop them all", c)
		}
	}
	return nil
}

// checkNoPermitted fails unless this thread's permitted, effective and
// inheritable sets are empty.
func checkNoPermitted() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, d := range data {
		if d.Permitted|d.Effective|d.Inheritable != 0 {
			return fmt.Errorf("the guest still holds capabilities (permitted %#x)", d.Permitted)
		}
	}
	return nil
}

// LastCap is the highest capability number this kernel knows.
func LastCap() int {
	last := 63
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		fmt.Sscanf(string(b), "%d", &last)
	}
	return last
}

// guestDataFloor is the guest's own data size (VmData) plus room to serve
// the sandbox: the least RLIMIT_DATA it can live under.
func guestDataFloor() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmData:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb<<10 + 64<<20
			}
		}
	}
	return 0
}
