//go:build linux

package main

// VM backend tests, under QEMU (TCG where KVM does not boot). TestVMBackend
// re-runs the network tests with AIRLOCK_TEST_BACKEND=vm, so every `airlock
// run` of theirs gets --backend vm; the TestVM* tests below check what only
// a VM has. Both need QEMU and the VM assets (`airlock images build
// --variant vm`), and skip with the reason otherwise.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/backend/vm"
	"github.com/airlock-dev/airlock/internal/config"
)

// vmTests are the tests of this suite that run for the vm backend too.
// Left out: those that read host-specific paths (the image's /etc/shadow
// and the guest kernel's /proc are not the host's) or time a start in
// milliseconds (TCG boots in seconds).
const vmTests = "TestClientsInsideReachAllowedHostsThroughTheGateway|TestSecretsNeverEnterTheSandbox|TestTransparent|TestVMOnly|" +
	"TestGoClientStreamsEventsWebSocketsAndLargeBodies|TestHTTP2BetweenSandboxAndGateway|TestAllowEndpointThroughTheCLI|TestATunnelHostCarriesTheUpstreamsOwnTLS|" +
	"TestRunsCommandAndPropagatesExitStatus|TestDetachedLifecycle|TestPTYRunsInteractiveShell|TestWorkspaceOverlayHostSeesNothingUntilApply|TestWritesOutsideTheWorkspaceFail|" +
	"TestPublishedPortReachesAPythonServerFromTheHostsCurl|TestAPublishedPortLetsNothingOut|TestDetachedSandboxServesItsPortsUntilItEnds|" +
	"TestEveryRuntimeTrustsTheGatewaysCAThroughItsOwnVariable|TestHiddenFilesShowNothingInsideInEveryWorkspaceMode|TestHiddenFilesAreNeverDiffedNorApplied"

// vmDataDir is the data dir holding the VM assets, for the tests' private
// HOMEs.
var vmDataDir = func() string {
	if x := os.Getenv("AIRLOCK_TEST_VM_DATA"); x != "" {
		return x
	}
	d, _ := config.DataDir()
	return d
}()

func vmDataEnv() []string {
	if testBackend() != "vm" || vmDataDir == "" {
		return nil
	}
	return []string{"AIRLOCK_DATA_DIR=" + vmDataDir}
}

// needVM skips unless QEMU and the VM assets are here.
func needVM(t *testing.T) {
	t.Helper()
	if _, err := vm.FindQEMU(os.Getenv); err != nil {
		t.Skipf("the vm backend is not tested: %v", err)
	}
	if _, err := vm.FindAssets(vmDataDir); err != nil {
		t.Skipf("the vm backend is not tested: %v", err)
	}
}

// TestVMBackend re-runs the network tests and the TestVMOnly ones against
// the vm backend.
func TestVMBackend(t *testing.T) {
	if testBackend() != "" {
		t.Skip("a re-run of the suite for one backend")
	}
	needVM(t)
	u := testUpstream(t)
	// The first start probes KVM (and says so once) and builds the initrd
	// for this binary: done here, so no test below sees it.
	warm := exec.Command(airlockBin, "run", "-q", "--backend", "vm", "--", "true")
	warm.Dir, warm.Env = t.TempDir(), append(os.Environ(), "AIRLOCK_DATA_DIR="+vmDataDir, "AIRLOCK_STATE_DIR="+t.TempDir())
	if out, err := warm.CombinedOutput(); err != nil {
		t.Fatalf("a first vm run: %v\n%s", err, out)
	}
	c := exec.Command(os.Args[0], "-test.v", "-test.timeout=15m", "-test.run="+vmTests)
	c.Env = append(os.Environ(), append([]string{"AIRLOCK_TEST_BIN=" + airlockBin, "AIRLOCK_TEST_BACKEND=vm", "AIRLOCK_TEST_VM_DATA=" + vmDataDir}, u.childEnv(t)...)...)
	out, err := c.CombinedOutput()
	t.Logf("with --backend vm:\n%s", out)
	if err != nil {
		t.Fatalf("tests failed with --backend vm: %v", err)
	}
}

func vmOnly(t *testing.T) {
	t.Helper()
	if testBackend() != "vm" {
		t.Skip("vm backend only: TestVMBackend runs it")
	}
}

func TestVMOnlyRunsInItsOwnKernel(t *testing.T) {
	vmOnly(t)
	e := newEnv(t)
	start := time.Now()
	r := e.run("run", "-q", "--", "uname", "-r")
	t.Logf("airlock run --backend vm -- uname -r took %s", time.Since(start))
	host, _ := exec.Command("uname", "-r").Output()
	if r.code != 0 || strings.TrimSpace(r.stdout) == "" || strings.TrimSpace(r.stdout) == strings.TrimSpace(string(host)) {
		t.Fatalf("uname -r in the VM = %v; the host's is %s", r, host)
	}
	r = e.run("run", "-q", "--", "sh", "-c", "echo x > /etc/escape; echo exit=$?; exit 3")
	if r.code != 3 || strings.Contains(r.stdout, "exit=0") || !strings.Contains(r.stderr, "/etc/escape") {
		t.Errorf("a write to /etc must fail and the exit code come back: %v", r)
	}
	if _, err := os.Stat("/etc/escape"); err == nil {
		t.Error("a write in the VM reached the host's /etc")
	}
}

// A supervisor killed with SIGKILL leaves no QEMU behind.
func TestVMOnlyLeavesNoQEMUWhenTheSupervisorIsKilled(t *testing.T) {
	vmOnly(t)
	e := newEnv(t)
	c := e.cmd("run", "-q", "--name", "victim", "--", "sleep", "300")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var pid string
	deadline := time.Now().Add(time.Minute)
	for pid == "" && time.Now().Before(deadline) {
		matches, _ := filepath.Glob(filepath.Join(e.state, "sandboxes", "*", "*", vm.PIDFile))
		for _, m := range matches {
			if b, err := os.ReadFile(m); err == nil {
				pid = strings.TrimSpace(string(b))
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if pid == "" {
		c.Process.Kill()
		c.Wait()
		t.Fatal("no QEMU pid was recorded within a minute")
	}
	time.Sleep(500 * time.Millisecond)
	c.Process.Kill()
	c.Wait()
	for range 50 {
		if _, err := os.Stat("/proc/" + pid); err != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("QEMU (pid %s) still runs after its supervisor was killed", pid)
}

// The workspace is the host's: live in bind mode, after apply in overlay
// mode (layered on the host by the file service), and nothing else of the
// host is inside.
func TestVMOnlySharesTheWorkspaceAndNothingElse(t *testing.T) {
	vmOnly(t)
	e := newEnv(t)
	os.WriteFile(filepath.Join(e.ws, "seen"), []byte("from the host\n"), 0o644)
	r := e.run("run", "-q", "--workspace-mode", "bind", "--", "sh", "-c", "cat seen; echo bind > bound; ls "+e.home+" 2>&1 | head -1; test -e /root/.local/share/airlock && echo host-data-visible; true")
	if r.code != 0 || !strings.Contains(r.stdout, "from the host") || strings.Contains(r.stdout, "host-data-visible") {
		t.Fatalf("bind run: %v", r)
	}
	if b, err := os.ReadFile(filepath.Join(e.ws, "bound")); err != nil || string(b) != "bind\n" {
		t.Errorf("a file written in a bind workspace must be on the host at once: %q, %v", b, err)
	}
	r = e.run("run", "-q", "--name", "ov", "--workspace-mode", "overlay", "--", "sh", "-c", "echo overlay > layered; rm seen")
	if r.code != 0 {
		t.Fatalf("overlay run: %v", r)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "layered")); err == nil {
		t.Error("an overlay write reached the host before apply")
	}
	if _, err := os.Stat(filepath.Join(e.ws, "seen")); err != nil {
		t.Error("an overlay delete reached the host before apply")
	}
	if r := e.run("apply", "--yes", "ov"); r.code != 0 {
		t.Fatalf("apply: %v", r)
	}
	if b, err := os.ReadFile(filepath.Join(e.ws, "layered")); err != nil || string(b) != "overlay\n" {
		t.Errorf("after apply: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "seen")); err == nil {
		t.Error("the overlay's delete was not applied")
	}
}
