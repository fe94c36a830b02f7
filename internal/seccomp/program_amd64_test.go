package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestProgramRefusesX32(t *testing.T) {
	prog := mustProgram(t)
	if got := eval(t, prog, auditArch, x32Bit|unix.SYS_GETPID); got != retEPERM {
		t.Errorf("x32 getpid: action %#x, want EPERM", got)
	}
}
