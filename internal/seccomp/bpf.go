package seccomp

import (
	"errors"
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// Offsets into struct seccomp_data (include/uapi/linux/seccomp.h).
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// argLow is the offset of the low 32 bits of syscall argument i. Classic BPF
// loads 32-bit words and both supported arches are little endian.
func argLow(i int) uint32 { return offArgs + 8*uint32(i) }

// Jump opcodes accepted by when/unless.
const (
	jeq  = unix.BPF_JEQ
	jge  = unix.BPF_JGE
	jset = unix.BPF_JSET
)

// program assembles a classic BPF program out of nested blocks. Every
// conditional jumps over exactly one block that ends in a return, so jump
// offsets are computed from block lengths and never need labels, and the
// accumulator is never seen clobbered by code after a block.
type program struct {
	insns []unix.SockFilter
	err   error
}

func (p *program) emit(code uint16, jt, jf uint8, k uint32) {
	p.insns = append(p.insns, unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k})
}

// load sets the accumulator to the 32-bit word at off in seccomp_data.
func (p *program) load(off uint32) { p.emit(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, 0, 0, off) }

// ret ends the program with the given seccomp action.
func (p *program) ret(action uint32) { p.emit(unix.BPF_RET|unix.BPF_K, 0, 0, action) }

// when runs body if "A op k" holds, otherwise falls through.
func (p *program) when(op uint16, k uint32, body func(*program)) { p.cond(op, k, false, body) }

// unless runs body if "A op k" does not hold, otherwise falls through.
func (p *program) unless(op uint16, k uint32, body func(*program)) { p.cond(op, k, true, body) }

func (p *program) cond(op uint16, k uint32, negate bool, body func(*program)) {
	if p.err != nil {
		return
	}
	var b program
	body(&b)
	n := len(b.insns)
	switch {
	case b.err != nil:
		p.err = b.err
		return
	case n == 0 || b.insns[n-1].Code != unix.BPF_RET|unix.BPF_K:
		p.err = errors.New("block does not end in a return")
		return
	case n > math.MaxUint8:
		// Classic BPF jump offsets are 8 bits wide.
		p.err = fmt.Errorf("block of %d instructions exceeds the BPF jump range", n)
		return
	}
	jt, jf := uint8(0), uint8(n)
	if negate {
		jt, jf = jf, jt
	}
	p.emit(unix.BPF_JMP|op|unix.BPF_K, jt, jf, k)
	p.insns = append(p.insns, b.insns...)
}

func (p *program) assemble() ([]unix.SockFilter, error) {
	if p.err != nil {
		return nil, p.err
	}
	if n := len(p.insns); n == 0 || n > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("program of %d instructions is outside 1..%d", n, unix.BPF_MAXINSNS)
	}
	return p.insns, nil
}
