package vm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/internal/guest"
)

// QEMUEnv names the QEMU binary to use instead of the one on PATH.
const QEMUEnv = "AIRLOCK_QEMU"

// qemuBinary is the full-system emulator: the *-microvm build is KVM-only,
// and this backend must be able to fall back to TCG.
const qemuBinary = "qemu-system-x86_64"

// ErrNoQEMU says QEMU is not installed.
var ErrNoQEMU = errors.New("QEMU is not installed: install qemu-system-x86 (apt install qemu-system-x86), or set " + QEMUEnv + " to a qemu-system-x86_64")

// FindQEMU returns the QEMU binary: $AIRLOCK_QEMU, else qemu-system-x86_64
// on PATH. A *-microvm build is refused (it has no TCG).
func FindQEMU(env func(string) string) (string, error) {
	p := env(QEMUEnv)
	if p == "" {
		var err error
		if p, err = exec.LookPath(qemuBinary); err != nil {
			return "", ErrNoQEMU
		}
	}
	if strings.HasSuffix(filepath.Base(p), "-microvm") {
		return "", fmt.Errorf("%s is QEMU's KVM-only microvm build: use %s", p, qemuBinary)
	}
	if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s=%s: not an executable file", QEMUEnv, p)
	}
	return p, nil
}

// Accel is how QEMU runs the guest's CPU.
type Accel string

const (
	KVM Accel = "kvm"
	TCG Accel = "tcg"
)

// Machine is one VM's shape. Its descriptors are inherited by QEMU as
// fd 3, 4, … in the order FDs lists them (see Args).
type Machine struct {
	Name   string // shows in QEMU's command line (prune finds it by it)
	Accel  Accel
	MemMiB int
	CPUs   int
	// Kernel, Initrd and Root are paths QEMU opens (/proc/self/fd/N for
	// descriptors it inherits).
	Kernel, Initrd, Root string
	RootFS               string // ext4 or erofs
	// Cmdline is the airlock.* kernel parameters (and any extra).
	Cmdline []string
	// Inherited descriptor numbers in QEMU: console (stream socket), the
	// control and VFS ports (stream sockets), the network (a datagram
	// socket). 0 leaves the device out.
	ConsoleFD, CtlFD, VFSFD, NetFD int
	// TSCKHz is given to a TCG microvm guest as tsc_early_khz (else its TSC
	// calibration can hang); unused otherwise.
	TSCKHz int
}

// tbMiB bounds TCG's translation cache (QEMU's default is 1 GiB), which
// counts against QEMU's memory limit (see qemuOverhead).
const tbMiB = 256

func accel(a Accel) string {
	if a == TCG {
		return "tcg,tb-size=" + strconv.Itoa(tbMiB)
	}
	return string(a)
}

// Args is QEMU's command line for m. Under KVM the machine is microvm
// (MMIO virtio devices, no firmware tables beyond ACPI); under TCG it is
// q35, which boots reliably there (microvm hung calibrating the TSC).
func Args(m Machine) []string {
	pci := m.Accel != KVM
	dev := func(name string) string {
		if pci {
			return name + "-pci"
		}
		return name + "-device"
	}
	a := []string{"-name", m.Name, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		// QEMU's own seccomp filter: no obsolete calls, no privilege
		// changes, no new processes, no scheduler or resource changes.
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-accel", accel(m.Accel), "-m", strconv.Itoa(max(m.MemMiB, 128)), "-smp", strconv.Itoa(max(m.CPUs, 1))}
	cmdline := []string{"console=ttyS0", "panic=-1", "quiet", "reboot=t"}
	if pci {
		a = append(a, "-machine", "q35", "-cpu", "max")
	} else {
		a = append(a, "-machine", "microvm,pit=on,pic=on,rtc=on", "-cpu", "host")
	}
	if !pci && m.TSCKHz > 0 {
		cmdline = append(cmdline, "tsc_early_khz="+strconv.Itoa(m.TSCKHz))
	}
	a = append(a, "-kernel", m.Kernel, "-initrd", m.Initrd,
		"-append", strings.Join(append(append(cmdline, "airlock.root=/dev/vda", "airlock.rootfs="+m.RootFS), m.Cmdline...), " "))
	if m.ConsoleFD > 0 {
		a = append(a, "-chardev", fmt.Sprintf("socket,id=con,fd=%d", m.ConsoleFD), "-serial", "chardev:con")
	}
	a = append(a, "-drive", "file="+m.Root+",if=none,id=root,format=raw,readonly=on", "-device", dev("virtio-blk")+",drive=root")
	if m.CtlFD > 0 || m.VFSFD > 0 {
		a = append(a, "-device", dev("virtio-serial"))
	}
	for _, p := range []struct {
		id, name string
		fd       int
	}{{"ctl", guest.CtlPort, m.CtlFD}, {"vfs", guest.VFSPort, m.VFSFD}} {
		if p.fd > 0 {
			a = append(a, "-chardev", fmt.Sprintf("socket,id=%s,fd=%d", p.id, p.fd), "-device", "virtserialport,chardev="+p.id+",name="+p.name)
		}
	}
	if m.NetFD > 0 {
		nic := dev("virtio-net") + ",netdev=net0"
		if pci {
			nic += ",romfile=" // no iPXE: the kernel is loaded directly
		}
		a = append(a, "-netdev", fmt.Sprintf("socket,id=net0,fd=%d", m.NetFD), "-device", nic)
	}
	a = append(a, "-device", dev("virtio-rng"))
	return a
}
