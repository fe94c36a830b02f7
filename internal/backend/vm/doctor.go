package vm

import (
	"context"
	"os/exec"
	"strings"
)

// Check is what `airlock doctor` says about the vm backend: whether QEMU
// and the images are here, and whether KVM really boots (a probe boot,
// cached) or the VM runs under TCG, at what cost.
func Check(ctx context.Context, o Options) (ok bool, detail, impact string) {
	o.defaults()
	qemu, err := FindQEMU(o.Env)
	if err != nil {
		return false, err.Error(), "--backend vm is unavailable"
	}
	version := qemu
	if out, err := exec.CommandContext(ctx, qemu, "--version").Output(); err == nil {
		version, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	}
	a, err := o.Assets(o.DataDir)
	if err != nil {
		return false, version + "; " + err.Error(), "--backend vm is unavailable until the images are built"
	}
	detail = version + "; kernel " + a.KernelVersion + ", root image " + a.RootFormat
	accel, why := chooseAccel(ctx, o)
	if accel == KVM {
		return true, detail + "; KVM boots", ""
	}
	if why == "" {
		why = "KVM did not boot here (cached verdict)"
	}
	return true, detail + "; TCG", why + "; under TCG a VM boots in about 2-5 s and each exec takes tens of milliseconds"
}
