package guest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/proto"
)

// The VM guest's boot contract with the host (internal/backend/vm): kernel
// parameters, virtio-serial port names and where the binary stays reachable.
const (
	// CtlPort is the virtio-serial port carrying the control protocol.
	CtlPort = "airlock.ctl"
	// VFSPort is the virtio-serial port carrying FUSE messages.
	VFSPort = "airlock.vfs"
	// VMBinary is where /init's binary stays reachable after the pivot (for
	// hostexec and mcp-bridge, which the sandbox runs by name).
	VMBinary = "/run/airlock/bin/airlock"
	// InitStarted is the console line /init writes first. The kernel boots
	// quietly, so it tells a boot that stalled in the kernel (the host
	// boots again) from one that stalled in airlock's set-up.
	InitStarted = "airlock init: started"
	// bootWait bounds each wait for a device the kernel probes after a
	// module loads.
	bootWait = 10 * time.Second
)

// IsVMInit reports whether this process is a VM's init: the kernel runs
// /init from the initramfs as PID 1.
func IsVMInit() bool { return os.Getpid() == 1 && os.Args[0] == "/init" }

// VMInit boots a VM guest and serves the host on its control port; it never
// returns. Any failure is printed on the console (the host shows its tail)
// and powers the VM off: a VM guest never hangs waiting for nothing.
func VMInit() {
	fmt.Fprintln(os.Stderr, InitStarted)
	conn, err := bootVM()
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock init:", err)
		printKernelLog()
		powerOff()
	}
	run(conn)
	powerOff()
}

// printKernelLog puts the kernel's last messages on the console after a
// failed boot: they say why a module or device failed.
func printKernelLog() {
	buf := make([]byte, 16<<10)
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err == nil && n > 0 {
		lines := strings.Split(strings.TrimSpace(string(buf[:n])), "\n")
		os.Stderr.WriteString(strings.Join(lines[max(0, len(lines)-20):], "\n") + "\n")
	}
}

func powerOff() {
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	os.Exit(1) // PID 1 exiting panics the kernel; -no-reboot ends QEMU either way
}

// bootParams are the airlock.* kernel parameters.
type bootParams struct {
	root, rootFS string // the root image's device and filesystem
	net          *proto.Net
	dns          string
}

func parseCmdline(cmdline string) (bootParams, error) {
	p := bootParams{root: "/dev/vda", rootFS: "ext4"}
	var ip, gw string
	mtu := 1500
	for _, f := range strings.Fields(cmdline) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "airlock.root":
			p.root = v
		case "airlock.rootfs":
			p.rootFS = v
		case "airlock.ip":
			ip = v
		case "airlock.gw":
			gw = v
		case "airlock.dns":
			p.dns = v
		case "airlock.mtu":
			n, err := strconv.Atoi(v)
			if err != nil || n < 576 || n > 65535 {
				return p, fmt.Errorf("airlock.mtu=%q: not an MTU", v)
			}
			mtu = n
		}
	}
	if p.rootFS != "ext4" && p.rootFS != "erofs" {
		return p, fmt.Errorf("airlock.rootfs=%q: use ext4 or erofs", p.rootFS)
	}
	if ip != "" {
		p.net = &proto.Net{Device: "eth0", Addr: ip, Gateway: gw, MTU: mtu}
	}
	return p, nil
}

// bootVM mounts the kernel's filesystems, loads the modules, switches to the
// root image under a writable layer, configures the network and opens the
// control port.
func bootVM() (*proto.Conn, error) {
	for _, m := range []struct{ fs, target string }{{"devtmpfs", "/dev"}, {"proc", "/proc"}, {"sysfs", "/sys"}} {
		os.MkdirAll(m.target, 0o755)
		if err := unix.Mount(m.fs, m.target, m.fs, unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return nil, step("mount "+m.target, err)
		}
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return nil, step("read kernel parameters", err)
	}
	p, err := parseCmdline(string(cmdline))
	if err != nil {
		return nil, step("kernel parameters", err)
	}
	if err := loadModules(); err != nil {
		return nil, err
	}
	if err := switchRoot(p); err != nil {
		return nil, err
	}
	if err := ptysAndShm(); err != nil {
		return nil, err
	}
	if err := loopbackUp(); err != nil {
		return nil, step("loopback up", err)
	}
	if p.net != nil {
		if err := waitFor("/sys/class/net/"+p.net.Device, bootWait); err != nil {
			return nil, step("network device", err)
		}
		if err := configure(p.net); err != nil {
			return nil, err
		}
	}
	if p.dns != "" {
		if err := os.WriteFile("/etc/resolv.conf", []byte("nameserver "+p.dns+"\n"), 0o644); err != nil {
			return nil, step("resolv.conf", err)
		}
	}
	port, err := openPort(CtlPort)
	if err != nil {
		return nil, err
	}
	// A port carries bytes, not descriptors: TTYs and stdio are relayed as
	// messages (see proto.StreamConn).
	return proto.StreamConn(port), nil
}

// loadModules loads /lib/modules/<version>/airlock.order's modules in order
// (the image builder wrote it dependencies first).
func loadModules() error {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return step("uname", err)
	}
	dir := filepath.Join("/lib/modules", unix.ByteSliceToString(u.Release[:]))
	f, err := os.Open(filepath.Join(dir, "airlock.order"))
	if errors.Is(err, os.ErrNotExist) {
		return nil // a kernel with its drivers built in
	}
	if err != nil {
		return step("module list", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name := strings.TrimSpace(sc.Text())
		if name == "" || strings.HasPrefix(name, "#") {
			continue
		}
		if err := loadModule(filepath.Join(dir, filepath.Base(name))); err != nil {
			return step("load module "+name, err)
		}
	}
	return sc.Err()
}

func loadModule(path string) error {
	if !strings.HasSuffix(path, ".ko") {
		path += ".ko"
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return nil
}

// switchRoot mounts the root image read-only under a tmpfs upper layer and
// moves the new root over the initramfs (pivot_root cannot leave rootfs).
// The binary stays reachable at VMBinary; the kernel's filesystems move along.
func switchRoot(p bootParams) error {
	if err := waitFor(p.root, bootWait); err != nil {
		return step("root device", err)
	}
	const lower, layer, root = "/.lower", "/.layer", "/.root"
	for _, d := range []string{lower, layer, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return step("mkdir "+d, err)
		}
	}
	if err := unix.Mount(p.root, lower, p.rootFS, unix.MS_RDONLY, ""); err != nil {
		return step("mount root image "+p.root, err)
	}
	if err := unix.Mount("tmpfs", layer, "tmpfs", 0, "mode=0755"); err != nil {
		return step("mount writable layer", err)
	}
	for _, d := range []string{layer + "/upper", layer + "/work"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return step("mkdir "+d, err)
		}
	}
	opts := "lowerdir=" + lower + ",upperdir=" + layer + "/upper,workdir=" + layer + "/work"
	if err := unix.Mount("overlay", root, "overlay", 0, opts); err != nil {
		return step("mount root overlay", err)
	}
	for _, d := range []string{"/dev", "/proc", "/sys"} {
		os.MkdirAll(root+d, 0o755)
		if err := unix.Mount(d, root+d, "", unix.MS_MOVE, ""); err != nil {
			return step("move "+d, err)
		}
	}
	for _, d := range []string{"/tmp", "/run"} {
		os.MkdirAll(root+d, 0o755)
		if err := unix.Mount("tmpfs", root+d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
			return step("mount "+d, err)
		}
	}
	os.Chmod(root+"/run", 0o755)
	bin := root + VMBinary
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return step("mkdir "+filepath.Dir(bin), err)
	}
	if err := os.WriteFile(bin, nil, 0o555); err != nil {
		return step("create "+bin, err)
	}
	if err := unix.Mount("/init", bin, "", unix.MS_BIND, ""); err != nil {
		return step("bind "+bin, err)
	}
	if err := unix.Mount("", bin, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return step("read-only "+bin, err)
	}
	if err := os.Chdir(root); err != nil {
		return step("chdir new root", err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return step("move new root", err)
	}
	if err := unix.Chroot("."); err != nil {
		return step("chroot", err)
	}
	return os.Chdir("/")
}

// ptysAndShm gives the VM's /dev a private devpts (whose ptmx any process
// may open, as in the native sandbox's /dev) and a /dev/shm.
func ptysAndShm() error {
	for _, d := range []string{"/dev/pts", "/dev/shm"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return step("mkdir "+d, err)
		}
	}
	if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return step("mount /dev/pts", err)
	}
	os.Remove("/dev/ptmx")
	if err := os.Symlink("pts/ptmx", "/dev/ptmx"); err != nil {
		return step("/dev/ptmx", err)
	}
	if err := unix.Mount("tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return step("mount /dev/shm", err)
	}
	return nil
}

// waitFor polls for path, which a driver creates asynchronously.
func waitFor(path string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		_, err := os.Stat(path)
		if err == nil || !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// openPort opens the virtio-serial port the host named name.
func openPort(name string) (*os.File, error) {
	deadline := time.Now().Add(bootWait)
	for {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil || strings.TrimSpace(string(b)) != name {
				continue
			}
			dev := "/dev/" + filepath.Base(filepath.Dir(n))
			if err := waitFor(dev, bootWait); err != nil {
				return nil, step("port "+name, err)
			}
			f, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, step("open port "+name, err)
			}
			return f, nil
		}
		if time.Now().After(deadline) {
			return nil, step("port "+name, errors.New("the VM has no such virtio-serial port"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sharesMount is where the host's file system is mounted in a VM guest.
const sharesMount = "/run/airlock/vfs"

// mountShares mounts the host's file system (FUSE, relayed raw to the VFS
// port: the guest holds no file system logic) and binds each share from it
// at its path.
func mountShares(shares []string) error {
	port, err := openPort(VFSPort)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(sharesMount, 0o755); err != nil {
		return step("mkdir "+sharesMount, err)
	}
	if err := relayShares(port); err != nil {
		return err
	}
	for _, p := range shares {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
			return step("share", fmt.Errorf("%q is not a clean absolute path", p))
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return step("mkdir "+p, err)
		}
		if err := unix.Mount(sharesMount+p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return step("bind "+p, err)
		}
	}
	return nil
}

// setupVM finishes a VM sandbox: the host's files and expected directories,
// the relay, the workspace, then the same lockdown as a native sandbox (the
// guest is root in the VM, so it can drop everything).
func setupVM(in *proto.Init, r *reaper) ([]string, error) {
	if in.Hostname != "" {
		if err := unix.Sethostname([]byte(in.Hostname)); err != nil {
			return nil, step("sethostname", err)
		}
	}
	if len(in.VM.Shares) > 0 {
		if err := mountShares(in.VM.Shares); err != nil {
			return nil, err
		}
	}
	for _, d := range in.VM.Dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, step("mkdir "+d, err)
		}
	}
	for _, f := range in.VM.Files {
		if !filepath.IsAbs(f.Path) {
			return nil, step("file", fmt.Errorf("%q is not absolute", f.Path))
		}
		if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
			return nil, step("mkdir for "+f.Path, err)
		}
		os.Remove(f.Path) // a symlink in the image (resolv.conf, the CA bundle) is replaced, not followed
		if err := os.WriteFile(f.Path, f.Data, 0o444); err != nil {
			return nil, step("write "+f.Path, err)
		}
	}
	if in.Net != nil {
		if err := waitFor("/sys/class/net/"+in.Net.Device, bootWait); err != nil {
			return nil, step("network device", err)
		}
		if err := configure(in.Net); err != nil {
			return nil, err
		}
	}
	in.Contained = false
	return setupContained(in, r)
}
