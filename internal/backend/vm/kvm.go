package vm

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/proto"
)

// tcgWarning is said once per sandbox that runs without KVM.
const tcgWarning = "KVM is not usable here (%s): the VM runs under TCG emulation, which boots in seconds and runs CPU-heavy work 10-50x slower"

// chooseAccel picks KVM only if a real boot under it reported ready within
// probeTimeout: a nested host can open /dev/kvm and pass its ioctls yet hang
// every stock guest. The verdict is cached per host kernel, QEMU and guest
// kernel. It returns TCG and why otherwise; why only when the probe ran
// now, so the fallback is said once, not at every start (airlock doctor
// says it any time).
func chooseAccel(ctx context.Context, o Options) (Accel, string) {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return TCG, fmt.Sprintf(tcgWarning, "/dev/kvm: "+err.Error())
	}
	f.Close()
	key, err := probeKey(o)
	if err != nil {
		return TCG, fmt.Sprintf(tcgWarning, err.Error())
	}
	cache := filepath.Join(o.DataDir, "vm", "kvm-"+key)
	if b, err := os.ReadFile(cache); err == nil {
		accel, _ := verdict(string(b))
		return accel, ""
	}
	v := "kvm"
	if err := probeKVM(ctx, o); err != nil {
		v = "tcg " + err.Error()
	}
	if os.MkdirAll(filepath.Dir(cache), 0o755) == nil {
		os.WriteFile(cache, []byte(v), 0o644)
	}
	return verdict(v)
}

func verdict(v string) (Accel, string) {
	if v == "kvm" {
		return KVM, ""
	}
	return TCG, fmt.Sprintf(tcgWarning, strings.TrimPrefix(v, "tcg "))
}

// probeKey names what the verdict depends on: the host kernel, the QEMU
// binary and the guest kernel.
func probeKey(o Options) (string, error) {
	qemu, err := FindQEMU(o.Env)
	if err != nil {
		return "", err
	}
	a, err := o.Assets(o.DataDir)
	if err != nil {
		return "", err
	}
	var u unix.Utsname
	unix.Uname(&u)
	h := sha256.New()
	h.Write(u.Release[:])
	h.Write(u.Version[:])
	for _, p := range []string{qemu, a.Kernel} {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return "", err
		}
		binary.Write(h, binary.LittleEndian, []int64{int64(st.Ino), st.Size, st.Mtim.Nano()})
	}
	return hex.EncodeToString(h.Sum(nil)[:12]), nil
}

// probeKVM boots the real kernel under KVM and waits for the guest's ready.
func probeKVM(ctx context.Context, o Options) error {
	s, err := boot(o, backend.Limits{MemoryBytes: 256 << 20, CPUs: 1}, KVM)
	if err != nil {
		return err
	}
	defer s.Close()
	in := &proto.Init{Workdir: "/", VM: &proto.VM{}}
	if err := s.handshake(ctx, in, probeTimeout, 0); err != nil {
		// Its first line says enough: the console's tail follows it.
		return fmt.Errorf("a boot under KVM failed: %s", strings.TrimPrefix(withoutConsole(err), "vm: "))
	}
	return nil
}
