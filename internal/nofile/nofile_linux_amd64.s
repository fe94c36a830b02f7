#include "textflag.h"

// func limit() (soft, hard uint64): prlimit64(0, RLIMIT_NOFILE, NULL, &old).
TEXT ·limit(SB),NOSPLIT,$16-16
	MOVQ	$302, AX // SYS_prlimit64
	MOVQ	$0, DI
	MOVQ	$7, SI // RLIMIT_NOFILE
	MOVQ	$0, DX
	LEAQ	old-16(SP), R10
	SYSCALL
	CMPQ	AX, $0
	JNE	none
	MOVQ	old-16(SP), AX
	MOVQ	AX, soft+0(FP)
	MOVQ	old-8(SP), AX
	MOVQ	AX, hard+8(FP)
	RET
none:
	MOVQ	$0, soft+0(FP)
	MOVQ	$0, hard+8(FP)
	RET
