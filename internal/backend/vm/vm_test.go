package vm

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/guest"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/testutil"
)

func TestArgsPickTheMachineByAccelerator(t *testing.T) {
	m := Machine{Name: "airlock-vm", Kernel: "/k", Initrd: "/i", Root: "/r", RootFS: "ext4", ConsoleFD: 6, CtlFD: 7, NetFD: 8, TSCKHz: 2000000}
	m.Accel = TCG
	tcg := strings.Join(Args(m), " ")
	for _, want := range []string{"-accel tcg,tb-size=256", "-machine q35", "virtio-net-pci,netdev=net0,romfile=", "-netdev socket,id=net0,fd=8",
		"socket,id=ctl,fd=7", "name=airlock.ctl", "-nodefaults", "-sandbox on,", "-no-user-config", "-no-reboot", "readonly=on", "virtio-rng-pci"} {
		if !strings.Contains(tcg, want) {
			t.Errorf("TCG args lack %q: %s", want, tcg)
		}
	}
	if strings.Contains(tcg, "tsc_early_khz") {
		t.Errorf("q35 needs no tsc_early_khz: %s", tcg)
	}
	m.Accel = KVM
	kvm := strings.Join(Args(m), " ")
	for _, want := range []string{"-accel kvm", "-machine microvm", "virtio-net-device", "virtio-serial-device", "tsc_early_khz=2000000"} {
		if !strings.Contains(kvm, want) {
			t.Errorf("KVM args lack %q: %s", want, kvm)
		}
	}
}

func TestFindQEMURefusesTheMicrovmBuild(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "qemu-system-x86_64-microvm")
	os.WriteFile(p, nil, 0o755)
	if _, err := FindQEMU(func(string) string { return p }); err == nil || !strings.Contains(err.Error(), "microvm") {
		t.Errorf("FindQEMU(%s) = %v, want a refusal", p, err)
	}
	if _, err := FindQEMU(func(k string) string {
		if k == "PATH" {
			return ""
		}
		return ""
	}); err != nil && !strings.Contains(err.Error(), "qemu-system-x86") {
		t.Errorf("missing QEMU: %v", err)
	}
}

// testDataDir is airlock's data dir, where `airlock images build --variant
// vm` puts the kernel and root image.
func testDataDir() string {
	if x := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "airlock")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "share", "airlock")
}

var (
	exeOnce    sync.Once
	exePath    string
	exeErr     error
	exeCleanup = func() {}
)

// guestBinary is the static airlock binary booted as /init (AIRLOCK_TEST_BIN
// when set).
func guestBinary(t *testing.T) string {
	t.Helper()
	exeOnce.Do(func() { exePath, exeCleanup, exeErr = testutil.AirlockForMain(false) })
	if exeErr != nil {
		t.Fatalf("build airlock: %v", exeErr)
	}
	return exePath
}

func TestMain(m *testing.M) {
	code := m.Run()
	exeCleanup()
	os.Exit(code)
}

// needVM skips unless QEMU and the VM assets are here.
func needVM(t *testing.T) Options {
	t.Helper()
	if _, err := FindQEMU(os.Getenv); err != nil {
		t.Skipf("no QEMU: %v", err)
	}
	o := Options{DataDir: testDataDir()}
	if _, err := FindAssets(o.DataDir); err != nil {
		t.Skipf("no VM assets: %v", err)
	}
	o.Exe = guestBinary(t)
	return o
}

func run(t *testing.T, s *Sandbox, argv ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	var mu sync.Mutex
	p, err := s.Exec(&proto.Exec{Argv: argv, Env: []string{"PATH=/usr/bin:/bin"}, Stdio: proto.StdioStream}, func(_ uint8, b []byte) {
		mu.Lock()
		out.Write(b)
		mu.Unlock()
	})
	if err != nil {
		t.Fatalf("exec %v: %v", argv, err)
	}
	p.CloseStdin()
	type waited struct {
		e   *proto.Exit
		err error
	}
	done := make(chan waited, 1)
	go func() { e, err := p.Wait(); done <- waited{e, err} }()
	var w waited
	select {
	case w = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%v did not end within a minute", argv)
	}
	e, err := w.e, w.err
	if err != nil {
		t.Fatalf("wait %v: %v", argv, err)
	}
	mu.Lock()
	defer mu.Unlock()
	return out.String(), e.Code
}

// TestVM boots one VM under the chosen accelerator and runs every check in it.
func TestVM(t *testing.T) {
	o := needVM(t)
	// A wedged VM must fail the run with every goroutine's stack, not eat
	// the suite's timeout (seen twice on a loaded machine, not reproduced).
	watchdog := time.AfterFunc(4*time.Minute, func() {
		debug.SetTraceback("all")
		panic("TestVM: no progress in 4 minutes")
	})
	defer watchdog.Stop()
	ws := t.TempDir()
	runDir := t.TempDir()
	spec := &backend.Spec{
		ID: "vmtest0001", Workspace: ws, HostHome: "/nonexistent", RunDir: runDir,
		Limits: backend.Limits{MemoryBytes: 512 << 20, CPUs: 1},
		Net:    &proto.Net{Device: "eth0", Addr: "10.0.2.15/24", Gateway: "10.0.2.2", MTU: 1500},
	}
	start := time.Now()
	p, err := Backend{Options: o}.Prepare(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := p.Start(context.Background(), spec, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := inst.(*Sandbox)
	defer s.Close()
	t.Logf("boot to ready: %s (%s), warnings %q", time.Since(start), s.accel, s.Warnings())

	t.Run("the guest kernel is not the host's", func(t *testing.T) {
		out, code := run(t, s, "uname", "-r")
		var u unix.Utsname
		unix.Uname(&u)
		if code != 0 || strings.TrimSpace(out) == "" || strings.TrimSpace(out) == unix.ByteSliceToString(u.Release[:]) {
			t.Errorf("uname -r = %q (exit %d), host %s", out, code, unix.ByteSliceToString(u.Release[:]))
		}
	})
	t.Run("exit codes come back", func(t *testing.T) {
		if _, code := run(t, s, "sh", "-c", "exit 7"); code != 7 {
			t.Errorf("exit = %d, want 7", code)
		}
		if _, code := run(t, s, "no-such-command"); code != 127 {
			t.Errorf("exit = %d, want 127", code)
		}
	})
	t.Run("writes outside the writable places fail", func(t *testing.T) {
		if out, code := run(t, s, "sh", "-c", "echo x > /etc/airlock-test"); code == 0 {
			t.Errorf("writing /etc succeeded: %s", out)
		}
		if out, code := run(t, s, "sh", "-c", "echo x > /tmp/ok && cat /tmp/ok"); code != 0 || out != "x\n" {
			t.Errorf("writing /tmp: %q (exit %d)", out, code)
		}
	})
	t.Run("the workspace is the host's directory", func(t *testing.T) {
		os.WriteFile(filepath.Join(ws, "from-host"), []byte("hello\n"), 0o644)
		out, code := run(t, s, "sh", "-c", "cat "+ws+"/from-host && echo written > "+ws+"/from-vm && mkdir -p "+ws+"/d/e && mv "+ws+"/from-vm "+ws+"/d/e/moved && ls -la "+ws)
		if code != 0 || !strings.Contains(out, "hello") {
			t.Fatalf("in the VM: %q (exit %d)", out, code)
		}
		if b, err := os.ReadFile(filepath.Join(ws, "d", "e", "moved")); err != nil || string(b) != "written\n" {
			t.Errorf("the VM's write on the host: %q, %v", b, err)
		}
	})
	t.Run("the network link is a datagram socket", func(t *testing.T) {
		l := s.Link()
		if l == nil {
			t.Fatal("no link")
		}
		defer l.File.Close()
		if err := l.Validate(); err != nil {
			t.Error(err)
		}
	})
	t.Run("the console log and pid file are in the run dir", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(runDir, PIDFile)); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(filepath.Join(runDir, ConsoleFile)); err != nil {
			t.Error(err)
		}
	})
	s.Close()
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("QEMU still runs after Close")
	}
}

// fakeQEMU is a "QEMU" that plays a hostile guest with a shell script: it
// gets the same descriptors (console fd 6, control fd 7) and command line.
func fakeQEMU(t *testing.T, script string) Options {
	t.Helper()
	// QEMU runs as nobody when the test is root: t.TempDir's parent is private.
	dir, err := os.MkdirTemp("", "airlock-fakeqemu-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	q := filepath.Join(dir, "qemu-system-x86_64")
	if err := os.WriteFile(q, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"vmlinuz", "modules.cpio", "root.ext4"} {
		os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644)
	}
	// The fake /init only has to pass as a static binary (no PT_INTERP):
	// an ELF header with no program headers.
	var elfHead bytes.Buffer
	binary.Write(&elfHead, binary.LittleEndian, elf.Header64{
		Ident: [elf.EI_NIDENT]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)},
		Type:  uint16(elf.ET_EXEC), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Ehsize: 64, Phentsize: 56, Shentsize: 64,
	})
	os.WriteFile(filepath.Join(dir, "airlock"), elfHead.Bytes(), 0o755)
	return Options{
		DataDir: dir, Exe: filepath.Join(dir, "airlock"),
		Env: func(k string) string {
			if k == QEMUEnv {
				return q
			}
			return ""
		},
		Assets: func(string) (Assets, error) {
			return Assets{Kernel: filepath.Join(dir, "vmlinuz"), Modules: filepath.Join(dir, "modules.cpio"), Root: filepath.Join(dir, "root.ext4"), RootFormat: "ext4"}, nil
		},
	}
}

// startFake starts a sandbox on a fake QEMU, which must fail; it returns
// the error and the sandbox's warnings.
func startFake(t *testing.T, o Options) (error, []string) {
	t.Helper()
	spec := &backend.Spec{ID: "fake0001", Workspace: t.TempDir(), RunDir: t.TempDir()}
	p, err := Backend{Options: o}.Prepare(context.Background(), spec)
	if err != nil {
		return err, nil
	}
	inst, err := p.Start(context.Background(), spec, nil, nil)
	if err == nil {
		inst.Close()
		t.Fatal("a guest that never said ready was accepted")
	}
	s := p.(*Sandbox)
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Error("QEMU still runs after the failed start")
	}
	return err, s.Warnings()
}

func TestAGuestSendingGarbageEndsTheStartWithAClearError(t *testing.T) {
	o := fakeQEMU(t, `echo "booting on the console" >&6; head -c 4 <&7 >/dev/null; printf '\000\000\000\010garbage!' >&7; sleep 30`)
	err, _ := startFake(t, o)
	if err == nil || !strings.Contains(err.Error(), "control channel") || !strings.Contains(err.Error(), "booting on the console") {
		t.Errorf("error = %v, want the broken control channel and the console's tail", err)
	}
}

func TestAGuestThatExitsDuringBootShowsItsConsole(t *testing.T) {
	o := fakeQEMU(t, `echo "Kernel panic - not syncing: no root" >&6; exit 1`)
	err, _ := startFake(t, o)
	if err == nil || !strings.Contains(err.Error(), "Kernel panic") || !strings.Contains(err.Error(), "QEMU ended: exit status 1") {
		t.Errorf("error = %v, want how QEMU ended and the console's tail", err)
	}
}

// A QEMU killed by a signal (the OOM killer, a stray kill) leaves an empty
// console: the error says how it ended. The fake is PID 1 of its own
// namespace, which a kill from inside cannot end: the kernel's signal for
// a spent CPU limit can.
func TestAQEMUKilledDuringBootSaysHowItEnded(t *testing.T) {
	o := fakeQEMU(t, `ulimit -t 1; while :; do :; done`)
	err, _ := startFake(t, o)
	if err == nil || !strings.Contains(err.Error(), "QEMU ended: signal: ") {
		t.Errorf("error = %v, want the signal QEMU ended by", err)
	}
}

func TestAFramingFloodIsRefused(t *testing.T) {
	o := fakeQEMU(t, `printf '\377\377\377\377' >&7; sleep 30`)
	err, _ := startFake(t, o)
	if err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("error = %v, want an oversized frame refused", err)
	}
}

// Prune kills a QEMU whose sandbox is gone, and only a process that is
// one (a recycled pid is left alone).
func TestPruneKillsTheQEMUOfAGoneSandbox(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "qemu-system-x86_64")
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	b, _ := os.ReadFile(sh)
	os.WriteFile(fake, b, 0o755)
	start := func(args ...string) *exec.Cmd {
		c := exec.Command(fake, args...)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	gone := start("-c", "sleep 60", "-name", "airlock-vm")
	other := start("-c", "sleep 60", "-name", "something-else")
	state := t.TempDir()
	for id, c := range map[string]*exec.Cmd{"gone00000001": gone, "other0000001": other, "live00000001": gone} {
		d := filepath.Join(state, "sandboxes", id, "g")
		os.MkdirAll(d, 0o700)
		os.WriteFile(filepath.Join(d, PIDFile), []byte(strconv.Itoa(c.Process.Pid)+"\n"), 0o600)
	}
	killed, err := Prune(state, func(id string) bool { return id == "live00000001" })
	if err != nil || len(killed) != 1 || !strings.Contains(killed[0], "gone00000001") {
		t.Fatalf("Prune = %q, %v; want the gone sandbox's QEMU only", killed, err)
	}
	done := make(chan error, 1)
	go func() { done <- gone.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("the gone sandbox's QEMU still runs")
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("a process that is not airlock's QEMU was killed: %v", err)
	}
}

// A boot that times out says how far it got: in the kernel (booted once
// more, then given up), or in the guest before or after it took its plan;
// and QEMU's CPU time, spinning or waiting.
func TestABootThatNeverReportsReadyTimesOut(t *testing.T) {
	const started = `echo "Probing EDD" >&6; echo "` + guest.InitStarted + `" >&6; `
	for _, c := range []struct {
		name, script string
		want         []string
		rebooted     bool
	}{
		{"in the kernel", `echo "Probing EDD" >&6; sleep 60`, []string{"did not start airlock's init within 500ms"}, true},
		{"before the plan", started + `sleep 60`, []string{"not ready within 1s", "its plan was never read", "QEMU had used 0."}, false},
		{"after the plan", started + `cat <&7 >/dev/null & sleep 60`, []string{"not ready within 1s", "it had read its plan", "QEMU had used 0."}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := fakeQEMU(t, c.script)
			o.BootTimeout = time.Second
			start := time.Now()
			err, warnings := startFake(t, o)
			t.Log(err, warnings)
			for _, want := range append(c.want, "Probing EDD") {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error = %v, want %q in it", err, want)
				}
			}
			rebooted := strings.Contains(strings.Join(warnings, "\n"), "booted it again")
			if rebooted != c.rebooted {
				t.Errorf("booted again: %v, want %v (warnings %q)", rebooted, c.rebooted, warnings)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("the timeout took %s", d)
			}
		})
	}
}
