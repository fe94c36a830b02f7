package seccomp

import (
	"cmp"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// Actions. Refused calls get an errno rather than SECCOMP_RET_KILL so that
// tools probing optional features (e.g. io_uring, userfaultfd, user
// namespaces) see an ordinary failure and fall back, instead of dying.
const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// cloneNSFlags are the namespace flags refused in clone(2). CLONE_NEWTIME
// (0x80) is left out: in clone(2) the low byte is the exit signal, and the
// kernel only honours CLONE_NEWTIME from unshare(2) and clone3(2).
const cloneNSFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// unshareNSFlags are the namespace flags refused in unshare(2).
const unshareNSFlags = cloneNSFlags | unix.CLONE_NEWTIME

// deniedIoctls are ioctl requests refused on any fd: TIOCSTI and TIOCLINUX
// can inject input into a terminal the sandbox shares with the user, and
// TIOCSETD switches line disciplines (a long-standing kernel attack surface).
var deniedIoctls = []uint32{unix.TIOCSTI, unix.TIOCLINUX, unix.TIOCSETD}

// allowedPersonas are the personality(2) arguments allowed, as in Docker's
// default profile: PER_LINUX, PER_LINUX32, UNAME26, both, and 0xffffffff (query).
var allowedPersonas = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

func deny(p *program)  { p.ret(retEPERM) }
func allow(p *program) { p.ret(retAllow) }

func build() ([]unix.SockFilter, error) {
	var p program

	// Syscall numbers are only meaningful for the native ABI; any other
	// (e.g. i386 via int 0x80 on x86_64) is refused wholesale.
	p.load(offArch)
	p.unless(jeq, auditArch, deny)

	p.load(offNr)
	archPrologue(&p)

	cases := []syscallCase{
		// Only the low 32 bits of the flags matter: clone(2) truncates them
		// with lower_32_bits() and unshare(2) rejects any unknown bit with
		// EINVAL.
		{unix.SYS_CLONE, func(b *program) {
			b.load(argLow(0)) // flags are arg0 on both x86_64 and arm64
			b.when(jset, cloneNSFlags, deny)
			allow(b)
		}},
		{unix.SYS_UNSHARE, func(b *program) {
			b.load(argLow(0))
			b.when(jset, unshareNSFlags, deny)
			allow(b)
		}},
		// clone3(2) takes its flags in a user-memory struct that BPF cannot
		// read. ENOSYS makes libcs and runtimes behave as on a pre-5.3
		// kernel and fall back to clone(2), whose flags we can check.
		{unix.SYS_CLONE3, func(b *program) { b.ret(retENOSYS) }},
		// The kernel takes the request as an unsigned int, so the upper 32
		// bits of the argument are ignored by it and by us.
		{unix.SYS_IOCTL, func(b *program) {
			b.load(argLow(1))
			for _, req := range deniedIoctls {
				b.when(jeq, req, deny)
			}
			allow(b)
		}},
		// personality(2) also takes an unsigned int.
		{unix.SYS_PERSONALITY, func(b *program) {
			b.load(argLow(0))
			for _, v := range allowedPersonas {
				b.when(jeq, v, allow)
			}
			deny(b)
		}},
	}
	for _, s := range deniedSyscalls() {
		cases = append(cases, syscallCase{uint32(s.nr), deny})
	}
	slices.SortFunc(cases, func(a, b syscallCase) int { return cmp.Compare(a.nr, b.nr) })
	for i := 1; i < len(cases); i++ {
		if cases[i].nr == cases[i-1].nr {
			return nil, fmt.Errorf("syscall %d is handled twice", cases[i].nr)
		}
	}
	dispatch(&p, cases)
	return p.assemble()
}

// syscallCase is what the filter does for one syscall number; any number
// without one is allowed.
type syscallCase struct {
	nr   uint32
	body func(*program) // ends in a return
}

// leafCases is how many numbers a branch of the search compares one by one.
const leafCases = 4

// dispatch emits a binary search over cases, sorted by number, that runs
// the matching case's body, or allows the call. A list compared in turn
// would cost every call it allows a walk past every case (~130
// instructions) and the start of every sandbox ~80 µs: loading a filter,
// the kernel runs it for each syscall number to find those it can allow
// without running it again (its action cache). The search takes ~log2 of
// that. Expects the number in A, which only the bodies change.
func dispatch(p *program, cases []syscallCase) {
	if len(cases) <= leafCases {
		for _, c := range cases {
			p.when(jeq, c.nr, c.body)
		}
		allow(p)
		return
	}
	mid := len(cases) / 2
	p.when(jge, cases[mid].nr, func(b *program) { dispatch(b, cases[mid:]) })
	dispatch(p, cases[:mid])
}
