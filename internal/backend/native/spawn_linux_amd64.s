#include "go_asm.h"
#include "textflag.h"

// The spawner's clone3 and its child (see spawn_linux_amd64.go). The child
// shares the parent's memory and runs on a stack of its own, which it never
// uses: registers and system calls only, no Go code, reading the spawnBlock
// in R12 and writing only its step, errno and old fields.

#define SYS_read	0
#define SYS_write	1
#define SYS_close	3
#define SYS_rt_sigaction	13
#define SYS_rt_sigprocmask	14
#define SYS_execve	59
#define SYS_exit	60
#define SYS_capset	126
#define SYS_setresuid	117
#define SYS_setresgid	119
#define SYS_setgroups	116
#define SYS_prctl	157
#define SYS_dup3	292
#define SYS_prlimit64	302
#define SYS_openat	257
#define SYS_clone3	435

// fail records step R14 and the error in AX if the call failed.
#define CHECK(step) MOVQ $step, R14; CMPQ AX, $0xfffffffffffff001; JCC fail

// func clone3(args *cloneArgs, size uintptr, b *spawnBlock) (pid uintptr, errno uintptr)
TEXT ·clone3(SB),NOSPLIT|NOFRAME,$0-40
	MOVQ	args+0(FP), DI
	MOVQ	size+8(FP), SI
	MOVQ	b+16(FP), R12
	MOVQ	$SYS_clone3, AX
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	NEGQ	AX
	MOVQ	$0, pid+24(FP)
	MOVQ	AX, errno+32(FP)
	RET
ok:
	MOVQ	AX, pid+24(FP)
	MOVQ	$0, errno+32(FP)
	RET

child:
	// Every handled signal back to SIG_DFL, so that none of the Go
	// runtime's handlers can run here once the mask is restored; an
	// ignored one stays ignored, as exec keeps it.
	MOVQ	$1, R13
sigloop:
	CMPQ	R13, $9
	JEQ	signext
	CMPQ	R13, $19
	JEQ	signext
	MOVQ	$SYS_rt_sigaction, AX
	MOVQ	R13, DI
	LEAQ	spawnBlock_dfl(R12), SI
	LEAQ	spawnBlock_old(R12), DX
	MOVQ	$8, R10
	SYSCALL
	CMPQ	AX, $0
	JNE	signext
	MOVQ	spawnBlock_old(R12), AX
	CMPQ	AX, $1 // SIG_IGN
	JNE	signext
	MOVQ	$SYS_rt_sigaction, AX
	MOVQ	R13, DI
	LEAQ	spawnBlock_old(R12), SI
	MOVQ	$0, DX
	MOVQ	$8, R10
	SYSCALL
signext:
	INCQ	R13
	CMPQ	R13, $65
	JLT	sigloop

	// prctl(PR_SET_PDEATHSIG, SIGKILL): the forking thread stays for the
	// guest's life.
	MOVQ	$SYS_prctl, AX
	MOVQ	$1, DI
	MOVQ	$9, SI
	MOVQ	$0, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	SYSCALL
	CHECK(1)

	// Wait for the parent to write the id maps: a byte on syncFD.
	MOVQ	$SYS_read, AX
	MOVQ	spawnBlock_syncFD(R12), DI
	LEAQ	spawnBlock_old(R12), SI
	MOVQ	$1, DX
	SYSCALL
	CHECK(2)
	CMPQ	AX, $1
	JNE	fail // no byte (errno 0): the parent gave up

	// Into the cgroup (v1): "0" to each tasks file moves the writer. With
	// one thread, it takes no threadgroup lock, whose writer waits for an
	// RCU grace period (up to ~20 ms) when the parent moves it instead.
	// Before the ids change: the files are root's, and so, still, is this.
	MOVQ	$0, R13
joinloop:
	CMPQ	R13, spawnBlock_njoins(R12)
	JGE	joindone
	MOVQ	$SYS_openat, AX
	MOVQ	$-100, DI // AT_FDCWD
	LEAQ	spawnBlock_joins(R12), SI
	MOVQ	(SI)(R13*8), SI
	MOVQ	$0x80001, DX // O_WRONLY|O_CLOEXEC
	MOVQ	$0, R10
	SYSCALL
	CHECK(11)
	MOVQ	AX, R8
	MOVQ	$SYS_write, AX
	MOVQ	R8, DI
	LEAQ	spawnBlock_self(R12), SI
	MOVQ	$1, DX
	SYSCALL
	CHECK(12)
	MOVQ	$SYS_close, AX
	MOVQ	R8, DI
	SYSCALL
	INCQ	R13
	JMP	joinloop
joindone:

	// Root's sandbox: uid and gid 0 inside, no groups (Go's Credential).
	MOVQ	spawnBlock_setIDs(R12), AX
	CMPQ	AX, $0
	JEQ	idsdone
	MOVQ	$SYS_setgroups, AX
	MOVQ	$0, DI
	MOVQ	$0, SI
	SYSCALL
	CHECK(3)
	MOVQ	$SYS_setresgid, AX
	MOVQ	$0, DI
	MOVQ	$0, SI
	MOVQ	$0, DX
	SYSCALL
	CHECK(4)
	MOVQ	$SYS_setresuid, AX
	MOVQ	$0, DI
	MOVQ	$0, SI
	MOVQ	$0, DX
	SYSCALL
	CHECK(5)
idsdone:

	// dup3(fds[i], i, 0): every source is >= nfds, so none is overwritten
	// before it is read.
	MOVQ	$0, R13
duploop:
	CMPQ	R13, spawnBlock_nfds(R12)
	JGE	dupdone
	MOVQ	$SYS_dup3, AX
	LEAQ	spawnBlock_fds(R12), DI
	MOVQ	(DI)(R13*8), DI
	MOVQ	R13, SI
	MOVQ	$0, DX
	SYSCALL
	CHECK(6)
	INCQ	R13
	JMP	duploop
dupdone:

	// The original soft RLIMIT_NOFILE, which the Go runtime raised.
	MOVQ	spawnBlock_nofile(R12), AX
	CMPQ	AX, $0
	JEQ	nofiledone
	MOVQ	$SYS_prlimit64, AX
	MOVQ	$0, DI
	MOVQ	$7, SI // RLIMIT_NOFILE
	LEAQ	spawnBlock_nofile(R12), DX
	MOVQ	$0, R10
	SYSCALL
	CHECK(7)
nofiledone:

	// Inheritable, permitted and effective: every capability, so that
	// each may be raised in the ambient set, which keeps them across exec.
	MOVQ	$SYS_capset, AX
	LEAQ	spawnBlock_capHdr(R12), DI
	LEAQ	spawnBlock_capData(R12), SI
	SYSCALL
	CHECK(8)
	MOVQ	$0, R13
caploop:
	CMPQ	R13, spawnBlock_lastCap(R12)
	JGT	capdone
	MOVQ	$SYS_prctl, AX
	MOVQ	$47, DI // PR_CAP_AMBIENT
	MOVQ	$2, SI // PR_CAP_AMBIENT_RAISE
	MOVQ	R13, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	SYSCALL
	CHECK(9)
	INCQ	R13
	JMP	caploop
capdone:

	// The timer slack the guest starts with (spawnAttr.TimerSlack).
	MOVQ	spawnBlock_slack(R12), SI
	CMPQ	SI, $0
	JEQ	slackdone
	MOVQ	$SYS_prctl, AX
	MOVQ	$29, DI // PR_SET_TIMERSLACK
	MOVQ	$0, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	SYSCALL
	CHECK(14)
slackdone:

	// The mask the parent had, then exec.
	MOVQ	$SYS_rt_sigprocmask, AX
	MOVQ	$2, DI // SIG_SETMASK
	LEAQ	spawnBlock_mask(R12), SI
	MOVQ	$0, DX
	MOVQ	$8, R10
	SYSCALL
	CHECK(10)
	MOVQ	$SYS_execve, AX
	MOVQ	spawnBlock_path(R12), DI
	MOVQ	spawnBlock_argv(R12), SI
	MOVQ	spawnBlock_envp(R12), DX
	SYSCALL
	MOVQ	$const_execStep, R14

fail:
	NEGQ	AX
	MOVQ	AX, spawnBlock_errno(R12)
	MOVQ	R14, spawnBlock_step(R12)
	MOVQ	$SYS_exit, AX
	MOVQ	$127, DI
	SYSCALL
	JMP	fail // not reached
