package seccomp

import (
	"encoding/binary"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// eval interprets prog for one seccomp_data the way the kernel does, for the
// subset of classic BPF the builder emits.
func eval(t *testing.T, prog []unix.SockFilter, arch, nr uint32, args ...uint64) uint32 {
	t.Helper()
	action, _ := evalSteps(t, prog, arch, nr, args...)
	return action
}

// evalSteps is eval that also says how many instructions ran.
func evalSteps(t *testing.T, prog []unix.SockFilter, arch, nr uint32, args ...uint64) (action uint32, steps int) {
	t.Helper()
	var data [64]byte
	binary.LittleEndian.PutUint32(data[offNr:], nr)
	binary.LittleEndian.PutUint32(data[offArch:], arch)
	for i, a := range args {
		binary.LittleEndian.PutUint64(data[offArgs+8*i:], a)
	}
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		steps++
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = binary.LittleEndian.Uint32(data[in.K:])
		case unix.BPF_RET | unix.BPF_K:
			return in.K, steps
		case unix.BPF_JMP | jeq | unix.BPF_K, unix.BPF_JMP | jge | unix.BPF_K, unix.BPF_JMP | jset | unix.BPF_K:
			var cond bool
			switch in.Code &^ (unix.BPF_JMP | unix.BPF_K) {
			case jeq:
				cond = acc == in.K
			case jge:
				cond = acc >= in.K
			case jset:
				cond = acc&in.K != 0
			}
			if cond {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		default:
			t.Fatalf("pc %d: unexpected opcode %#x", pc, in.Code)
		}
	}
	t.Fatal("program ran off its end")
	return 0, steps
}

func mustProgram(t *testing.T) []unix.SockFilter {
	t.Helper()
	prog, err := Program()
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

func TestProgramShape(t *testing.T) {
	prog := mustProgram(t)
	if n := len(prog); n < 50 || n > 400 {
		t.Errorf("program has %d instructions, want a few hundred at most", n)
	}
	for pc, in := range prog {
		if in.Code&0x07 == unix.BPF_JMP {
			if end := pc + 1 + int(max(in.Jt, in.Jf)); end >= len(prog) {
				t.Errorf("pc %d: jump to %d is past the end (%d)", pc, end, len(prog))
			}
		}
	}
	if last := prog[len(prog)-1]; last.Code != unix.BPF_RET|unix.BPF_K || last.K != retAllow {
		t.Errorf("last instruction %+v, want RET ALLOW", last)
	}
}

func TestDenied(t *testing.T) {
	denied := Denied()
	if !slices.IsSorted(denied) {
		t.Error("Denied() is not sorted")
	}
	if c := slices.Compact(slices.Clone(denied)); len(c) != len(denied) {
		t.Error("Denied() has duplicates")
	}
	for _, name := range []string{
		"ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
		"move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
		"setns", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "kexec_load",
		"kexec_file_load", "init_module", "finit_module", "delete_module", "io_uring_setup",
		"io_uring_enter", "io_uring_register", "userfaultfd", "open_by_handle_at",
		"name_to_handle_at", "reboot", "swapon", "swapoff", "acct", "clock_adjtime",
		"clock_settime", "settimeofday", "adjtimex", "kcmp", "lookup_dcookie", "mbind",
		"set_mempolicy", "get_mempolicy", "move_pages", "migrate_pages", "nfsservctl",
		"quotactl", "quotactl_fd", "syslog", "vhangup", "fanotify_init", "lsm_set_self_attr",
	} {
		if !slices.Contains(denied, name) {
			t.Errorf("Denied() lacks %s", name)
		}
	}
	for _, name := range []string{
		"seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
		"clone", "clone3", "unshare", "ioctl", "personality", "execve", "socket",
	} {
		if slices.Contains(denied, name) {
			t.Errorf("Denied() includes %s, which must stay (conditionally) allowed", name)
		}
	}
}

func TestProgramDecisions(t *testing.T) {
	prog := mustProgram(t)
	native := func(nr uintptr, args ...uint64) uint32 { return eval(t, prog, auditArch, uint32(nr), args...) }

	for _, s := range deniedSyscalls() {
		if got := native(s.nr); got != retEPERM {
			t.Errorf("%s: action %#x, want EPERM", s.name, got)
		}
	}

	const threadFlags = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
		unix.CLONE_SYSVSEM | unix.CLONE_THREAD | unix.CLONE_SETTLS
	for _, tc := range []struct {
		name string
		got  uint32
		want uint32
	}{
		{"getpid", native(unix.SYS_GETPID), retAllow},
		{"seccomp", native(unix.SYS_SECCOMP), retAllow},
		{"landlock_restrict_self", native(unix.SYS_LANDLOCK_RESTRICT_SELF), retAllow},
		{"foreign arch", eval(t, prog, unix.AUDIT_ARCH_I386, 20), retEPERM},
		{"foreign arch, native getpid nr", eval(t, prog, unix.AUDIT_ARCH_I386, unix.SYS_GETPID), retEPERM},

		{"clone thread", native(unix.SYS_CLONE, threadFlags), retAllow},
		{"clone fork", native(unix.SYS_CLONE, uint64(unix.SIGCHLD)), retAllow},
		{"clone vfork pidfd", native(unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_VFORK|unix.CLONE_PIDFD|uint64(unix.SIGCHLD)), retAllow},
		{"clone exit signal 0x80", native(unix.SYS_CLONE, 0x80), retAllow},
		{"clone newuser", native(unix.SYS_CLONE, unix.CLONE_NEWUSER|uint64(unix.SIGCHLD)), retEPERM},
		{"clone newns", native(unix.SYS_CLONE, unix.CLONE_NEWNS), retEPERM},
		{"clone newnet", native(unix.SYS_CLONE, unix.CLONE_NEWNET), retEPERM},
		{"clone newpid in high word only", native(unix.SYS_CLONE, unix.CLONE_NEWPID<<32), retAllow},
		{"clone3", native(unix.SYS_CLONE3), retENOSYS},

		{"unshare 0", native(unix.SYS_UNSHARE, 0), retAllow},
		{"unshare files", native(unix.SYS_UNSHARE, unix.CLONE_FILES|unix.CLONE_FS), retAllow},
		{"unshare newuser", native(unix.SYS_UNSHARE, unix.CLONE_NEWUSER), retEPERM},
		{"unshare newtime", native(unix.SYS_UNSHARE, unix.CLONE_NEWTIME), retEPERM},
		{"unshare newcgroup", native(unix.SYS_UNSHARE, unix.CLONE_NEWCGROUP), retEPERM},
		{"unshare newipc|newuts", native(unix.SYS_UNSHARE, unix.CLONE_NEWIPC|unix.CLONE_NEWUTS), retEPERM},

		{"ioctl TIOCGWINSZ", native(unix.SYS_IOCTL, 0, unix.TIOCGWINSZ), retAllow},
		{"ioctl TIOCSCTTY", native(unix.SYS_IOCTL, 0, unix.TIOCSCTTY), retAllow},
		{"ioctl TIOCSTI", native(unix.SYS_IOCTL, 0, unix.TIOCSTI), retEPERM},
		{"ioctl TIOCSTI high bits", native(unix.SYS_IOCTL, 0, 0xdead<<32|unix.TIOCSTI), retEPERM},
		{"ioctl TIOCLINUX", native(unix.SYS_IOCTL, 0, unix.TIOCLINUX), retEPERM},
		{"ioctl TIOCSETD", native(unix.SYS_IOCTL, 0, unix.TIOCSETD), retEPERM},

		{"personality 0", native(unix.SYS_PERSONALITY, 0), retAllow},
		{"personality PER_LINUX32", native(unix.SYS_PERSONALITY, 8), retAllow},
		{"personality UNAME26", native(unix.SYS_PERSONALITY, 0x20000), retAllow},
		{"personality query", native(unix.SYS_PERSONALITY, 0xffffffff), retAllow},
		{"personality ADDR_NO_RANDOMIZE", native(unix.SYS_PERSONALITY, 0x40000), retEPERM},
		{"personality READ_IMPLIES_EXEC", native(unix.SYS_PERSONALITY, 0x400000), retEPERM},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: action %#x, want %#x", tc.name, tc.got, tc.want)
		}
	}
}

// Every native syscall number gets the action its case says, and any
// number without a case is allowed, found in a few steps: the filter is a
// search, not a list (dispatch).
func TestEveryNumberIsDecidedInAFewSteps(t *testing.T) {
	prog := mustProgram(t)
	denied := map[uint32]bool{}
	for _, s := range deniedSyscalls() {
		denied[uint32(s.nr)] = true
	}
	longest := 0
	for nr := uint32(0); nr < 1024; nr++ {
		// Arguments of 0: clone, unshare, ioctl and personality allow them.
		got, steps := evalSteps(t, prog, auditArch, nr)
		want := uint32(retAllow)
		switch {
		case denied[nr]:
			want = retEPERM
		case nr == unix.SYS_CLONE3:
			want = retENOSYS
		}
		if got != want {
			t.Errorf("syscall %d: action %#x, want %#x", nr, got, want)
		}
		longest = max(longest, steps)
	}
	// Arch and number checks, ~log2(cases/leafCases) branches, a leaf's
	// compares and a return; a list of every case would take ~130.
	if longest > 20 {
		t.Errorf("a syscall number takes %d instructions to decide, want at most 20", longest)
	}
}

func TestBuilderRejectsLongJumps(t *testing.T) {
	var p program
	p.when(jeq, 1, func(b *program) {
		for range 300 {
			b.load(offNr)
		}
		b.ret(retAllow)
	})
	if _, err := p.assemble(); err == nil {
		t.Error("assemble accepted a 301-instruction block")
	}

	var q program
	q.when(jeq, 1, func(b *program) { b.load(offNr) })
	if _, err := q.assemble(); err == nil {
		t.Error("assemble accepted a block that does not end in a return")
	}
}
