//go:build linux

package main

// README claims that had no test of their own: the namespaces not covered
// elsewhere, the private /run and /dev, planted container and SSH-agent
// sockets, --rw of a credential dir, the CPU limit, --allow-endpoint through
// the CLI and HTTP/2 between the sandbox and the gateway. Each refusal sits
// beside a positive control, so a refusal means the guard, not a broken run.

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/testutil"
)

// runScript runs script in a fresh sandbox and requires it to reach its end.
func (e *env) runScript(script string, flags ...string) result {
	e.t.Helper()
	r := e.sh(script+"\necho END", flags...)
	if r.code != 0 || !strings.HasSuffix(r.stdout, "END\n") {
		e.t.Fatalf("the script did not run to its end: %v", r)
	}
	return r
}

// fields parses the "key value" lines a script printed.
func fields(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

func TestIPCCgroupAndUserNamespacesAreTheSandboxsOwn(t *testing.T) {
	e := newEnv(t)
	// A System V shared memory segment on the host, by key.
	key := 0x41490000 + os.Getpid()%0xffff
	shm := `import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
key, create = int(sys.argv[1]), sys.argv[2] == "create"
id = libc.shmget(key, 4096, (0o1000 | 0o600) if create else 0)  # IPC_CREAT
print("shm", "found" if id >= 0 else "none")
if create and id >= 0: print("id", id)`
	out, err := exec.Command("python3", "-c", shm, strconv.Itoa(key), "create").Output()
	f := fields(string(out))
	if err != nil || f["shm"] != "found" {
		t.Fatalf("create a host shm segment: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ipcrm", "-m", f["id"]).Run() })
	if out, _ := exec.Command("python3", "-c", shm, strconv.Itoa(key), "find").Output(); fields(string(out))["shm"] != "found" {
		t.Fatalf("positive control: the host does not find its own segment: %s", out)
	}
	// An abstract Unix socket on the host (abstract names live in the
	// network namespace).
	abstract := fmt.Sprintf("@airlock-test-%d", os.Getpid())
	ln, err := net.Listen("unix", abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if c, err := net.Dial("unix", abstract); err != nil {
		t.Fatalf("positive control: the host cannot reach its abstract socket: %v", err)
	} else {
		c.Close()
	}
	host := map[string]string{}
	for _, ns := range []string{"ipc", "cgroup", "user", "uts", "pid", "net", "mnt"} {
		host[ns], _ = os.Readlink("/proc/self/ns/" + ns)
	}
	hostCgroup, _ := os.ReadFile("/proc/self/cgroup")
	script := `for ns in ipc cgroup user uts pid net mnt; do echo "$ns $(readlink /proc/self/ns/$ns)"; done
		echo "uid_map $(cat /proc/self/uid_map | tr -s ' ' | tr '\n' ';')"
		echo "cgroups $(cat /proc/self/cgroup | tr '\n' ';')"
		python3 -c '` + shm + `' ` + strconv.Itoa(key) + ` find
		python3 -c 'import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0` + abstract[1:] + `"); print("abstract reached")
except OSError as e:
    print("abstract", e.strerror.replace(" ", "-"))'`
	got := fields(e.runScript(script).stdout)
	// The README's claim is the native backend's; a docker container (no
	// userns-remap; host cgroupns on cgroup v1) may share these two.
	docker := testBackend() == "docker"
	for ns, h := range host {
		if docker && (ns == "user" || ns == "cgroup") {
			t.Logf("docker: %s namespace shared with the host: %v", ns, got[ns] == h)
			continue
		}
		if got[ns] == "" || got[ns] == h {
			t.Errorf("%s namespace inside = %q, host's = %q: want its own", ns, got[ns], h)
		}
	}
	if got["shm"] != "none" {
		t.Errorf("the host's shm segment is visible inside: %v", got)
	}
	if got["abstract"] != "Connection-refused" {
		t.Errorf("the host's abstract socket: %q, want Connection refused", got["abstract"])
	}
	// One uid is mapped (the caller's), not the host's whole range; as root,
	// one slot of airlock's own range (see idmap_e2e_test.go), never host ids.
	if docker {
		return
	}
	m := strings.Fields(strings.TrimSuffix(got["uid_map"], ";"))
	switch {
	case os.Getuid() == 0:
		if len(m) != 3 || m[0] != "0" || m[1] == "0" || m[2] != "65536" {
			t.Errorf("uid_map inside = %q, want 0 mapped to a slot of 65536 ids that are not root's", got["uid_map"])
		}
	case len(m) != 3 || m[2] != "1" || strings.Contains(got["uid_map"], "4294967295"):
		t.Errorf("uid_map inside = %q, want one line mapping one uid", got["uid_map"])
	}
	// The cgroup view is rooted at the sandbox: the host's own path for this
	// process (when it is not the root) does not appear.
	for _, line := range strings.Split(strings.TrimSpace(string(hostCgroup)), "\n") {
		if p := line[strings.LastIndexByte(line, ':')+1:]; p != "/" && strings.Contains(got["cgroups"], ":"+p+";") {
			t.Errorf("the host's cgroup path %q is visible inside: %q", p, got["cgroups"])
		}
	}
}

func TestRunAndDevArePrivate(t *testing.T) {
	e := newEnv(t)
	name := fmt.Sprintf("airlock-test-%d", os.Getpid())
	got := fields(e.runScript(`
		echo "run $(ls -A /run | tr '\n' ' ')"
		echo "dev $(ls -A /dev | tr '\n' ' ')"
		fstype() { awk -v m="$1" '$5 == m { for (i = 7; $i != "-"; i++); t = $(i+1) } END { print t }' /proc/self/mountinfo; }
		echo "run-mount $(fstype /run)"
		echo "dev-mount $(fstype /dev)"
		echo private > /dev/shm/` + name + ` && echo "shm-write ok"`).stdout)
	if got["shm-write"] != "ok" {
		t.Fatalf("positive control: /dev/shm should be writable inside: %v", got)
	}
	if _, err := os.Stat("/dev/shm/" + name); err == nil {
		os.Remove("/dev/shm/" + name)
		t.Errorf("/dev/shm/%s written inside appeared on the host", name)
	}
	if testBackend() == "docker" { // /run is the image's own
		if got["dev-mount"] != "tmpfs" {
			t.Errorf("/dev is a %q mount inside, want its own tmpfs", got["dev-mount"])
		}
		return
	}
	// Both are mounts of their own, not the host's.
	if got["run-mount"] != "tmpfs" || got["dev-mount"] != "tmpfs" {
		t.Errorf("/run is a %q mount and /dev a %q one inside, want their own tmpfs", got["run-mount"], got["dev-mount"])
	}
	// /run holds nothing of the host's, though the host's /run is not empty.
	if ents, _ := os.ReadDir("/run"); len(ents) == 0 {
		t.Log("the host's /run is empty: the /run listing shows little here")
	}
	for _, n := range strings.Fields(got["run"]) {
		t.Errorf("/run inside holds %q", n)
	}
	// /dev holds the usual few devices, none of the host's disks or kmsg.
	allowed := map[string]bool{"null": true, "zero": true, "full": true, "random": true, "urandom": true, "tty": true,
		"pts": true, "ptmx": true, "shm": true, "fd": true, "stdin": true, "stdout": true, "stderr": true, "core": true,
		"console": true, "mqueue": true, name: true}
	for _, n := range strings.Fields(got["dev"]) {
		if !allowed[n] {
			t.Errorf("/dev inside holds %q", n)
		}
	}
	if len(strings.Fields(got["dev"])) < 5 {
		t.Errorf("/dev inside = %q, want the usual devices", got["dev"])
	}
	hostDev, _ := os.ReadDir("/dev")
	extra := 0
	for _, d := range hostDev {
		if !allowed[d.Name()] {
			extra++
		}
	}
	if extra == 0 {
		t.Log("the host's /dev has nothing beyond the sandbox's set: the /dev check shows little here")
	}
}

// listenUnix serves a Unix socket at path that answers "hello" and closes.
func listenUnix(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o777)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello"))
			c.Close()
		}
	}()
}

func TestPlantedContainerAndAgentSocketsAreUnreachable(t *testing.T) {
	if testBackend() == "docker" {
		t.Skip("a container sees its image and its mounts, not the host's /var/tmp where the sockets are planted")
	}
	e := newEnv(t)
	// Outside the sandbox's private /tmp, so the host's view would be visible.
	dir, err := os.MkdirTemp("/var/tmp", "airlock-sockets-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	plain := filepath.Join(dir, "plain", "plain.sock")
	agent := filepath.Join(dir, "ssh", "agent.sock")
	dockerHost := filepath.Join(dir, "docker", "docker.sock")
	xdg := filepath.Join(dir, "xdg")
	podman := filepath.Join(xdg, "podman", "podman.sock")
	sockets := []string{plain, agent, dockerHost, podman}
	for _, s := range sockets {
		listenUnix(t, s)
	}
	// The engine's own socket, where there is one this user may reach.
	for _, s := range []string{"/var/run/docker.sock", "/run/containerd/containerd.sock", "/run/podman/podman.sock"} {
		if c, err := net.Dial("unix", s); err == nil {
			c.Close()
			sockets = append(sockets, s)
		}
	}
	probe := `import socket, sys
for p in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p); print(p, "reached", s.recv(5).decode())
    except OSError as e:
        print(p, e.strerror.replace(" ", "-"))`
	c := e.cmd(append([]string{"run", "-q", "--", "python3", "-c", probe}, sockets...)...)
	c.Env = e.environ("SSH_AUTH_SOCK="+agent, "DOCKER_HOST=unix://"+dockerHost, "XDG_RUNTIME_DIR="+xdg)
	r := e.runCmd(c)
	if r.code != 0 {
		t.Fatalf("probe: %v", r)
	}
	got := fields(r.stdout)
	// Positive control: a socket nobody hides is reachable from inside.
	if got[plain] != "reached hello" {
		t.Fatalf("positive control: the plain socket %s: %q, want reached (else the refusals below prove nothing): %v", plain, got[plain], r)
	}
	for _, s := range sockets[1:] {
		if strings.HasPrefix(got[s], "reached") || got[s] == "" {
			t.Errorf("%s from inside: %q, want unreachable", s, got[s])
		}
	}
}

// A sandbox cannot write the config later runs obey: a place it writes in
// place (a bind workspace, --rw, --home) may not hold airlock's config dir
// or state root. Hidden inside, the config dir could still be taken over:
// made where it does not exist yet, or its parent renamed away (the mask
// moves with it) and made anew.
func TestASandboxCannotWriteTheConfigLaterRunsObey(t *testing.T) {
	e := newEnv(t)
	cfg := filepath.Join(e.home, ".config", "airlock", "config.yaml")
	plant := `mkdir -p ~/.config/airlock && echo 'network: {allow: ["*"]}' > ~/.config/airlock/config.yaml && echo PLANTED; ` +
		`mv ~/.config ~/.config-away 2>/dev/null && mkdir -p ~/.config/airlock && echo x > ~/.config/airlock/config.yaml && echo MOVED; echo END`
	r := e.run("run", "-q", "--workspace", e.home, "--workspace-mode", "bind", "--", "sh", "-c", plant)
	if r.code != 125 || !strings.Contains(r.stderr, "airlock's own") || !strings.Contains(r.stderr, "--workspace-mode overlay") {
		t.Fatalf("a bind workspace holding the config dir: want a refusal that says what to do, got %v", r)
	}
	r = e.run("run", "-q", "--workspace", e.ws, "--rw", e.home, "--", "sh", "-c", plant)
	if r.code != 125 || !strings.Contains(r.stderr, "--rw") {
		t.Fatalf("--rw of the home: want a refusal, got %v", r)
	}
	// Positive control: an overlay workspace over the home runs, and what it
	// wrote in the hidden dir is never applied.
	r = e.run("run", "-q", "--workspace", e.home, "--workspace-mode", "overlay", "--auto-apply", "--", "sh", "-c", plant)
	if !strings.Contains(r.stdout, "END") {
		t.Fatalf("an overlay workspace over the home did not run: %v", r)
	}
	if _, err := os.Stat(cfg); err == nil {
		t.Fatalf("the sandbox's config reached the host at %s: %v", cfg, r)
	}
}

func TestRWOfACredentialDirKeepsItHidden(t *testing.T) {
	e := newEnv(t)
	for rel, content := range map[string]string{".ssh/id_ed25519": "CANARY-SSH", "docs/readme": "docs"} {
		p := filepath.Join(e.home, rel)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ssh, docs := filepath.Join(e.home, ".ssh"), filepath.Join(e.home, "docs")
	// Positive control: --rw of a plain dir of the home exposes it, writably.
	r := e.runScript("cat "+docs+"/readme; echo; echo new > "+docs+"/written", "--rw", docs)
	if !strings.HasPrefix(r.stdout, "docs\n") {
		t.Fatalf("--rw %s: %v", docs, r)
	}
	if b, _ := os.ReadFile(filepath.Join(docs, "written")); string(b) != "new\n" {
		t.Fatalf("--rw %s: the write did not reach the host (%q)", docs, b)
	}
	r = e.runScript("cat "+ssh+"/id_ed25519 2>/dev/null; ls -A "+ssh+" 2>/dev/null; echo x > "+ssh+"/planted 2>/dev/null && echo WROTE", "--rw", ssh)
	if strings.Contains(r.stdout, "CANARY") || strings.Contains(r.stdout, "id_ed25519") || strings.Contains(r.stdout, "WROTE") {
		t.Fatalf("--rw %s exposed it: %v", ssh, r)
	}
	if _, err := os.Stat(filepath.Join(ssh, "planted")); err == nil {
		t.Fatal("a write into --rw ~/.ssh reached the host")
	}
}

// TestCPULimitIsEnforced measures the CPU time two busy processes get in
// about two seconds, with and without --cpus 0.5: the baseline, measured in
// the same test, shows what this (possibly busy) machine gives.
func TestCPULimitIsEnforced(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("CPU limits need a cgroup; unprivileged, airlock warns that --cpus is not enforced")
	}
	e := newEnv(t)
	const wall = 2.0
	burn := fmt.Sprintf(`python3 -c '
import os, time
kids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        end = time.time() + %g
        while time.time() < end: pass
        os._exit(0)
    kids.append(pid)
for k in kids: os.waitpid(k, 0)
t = os.times()
print("cpu", t.children_user + t.children_system)'`, wall)
	cpu := func(flags ...string) float64 {
		r := e.runScript(burn, flags...)
		v, err := strconv.ParseFloat(fields(r.stdout)["cpu"], 64)
		if err != nil {
			t.Fatalf("cpu time: %v", r)
		}
		return v
	}
	base := cpu()
	limited := cpu("--cpus", "0.5")
	t.Logf("CPU time of two busy processes in %gs: %.2fs unlimited, %.2fs under --cpus 0.5", wall, base, limited)
	max := 0.5*wall*1.25 + 0.1
	if base < 1.2*max {
		t.Skipf("unlimited, the machine gave only %.2fs: too busy to tell a limit of %.2fs from the load", base, max)
	}
	if limited > max {
		t.Errorf("under --cpus 0.5 they got %.2fs of CPU in %gs, want at most %.2fs", limited, wall, max)
	}
}

func TestAllowEndpointThroughTheCLI(t *testing.T) {
	u := testUpstream(t)
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		r := e.run(append(u.flags("--network-mode", mode, "--allow-host", "example.com", "--allow-endpoint", "example.com GET /v1/*"),
			"--", "sh", "-c", `
			for req in "GET /v1/models" "POST /v1/models" "GET /admin"; do
				set -- $req
				echo "$1-$2 $(curl -s -o /dev/null -w '%{http_code}' -X $1 https://example.com$2)"
			done
			echo END`)...)
		if r.code != 0 || !strings.HasSuffix(r.stdout, "END\n") {
			t.Fatalf("run: %v", r)
		}
		got := fields(r.stdout)
		for req, want := range map[string]string{"GET-/v1/models": "200", "POST-/v1/models": "403", "GET-/admin": "403"} {
			if got[req] != want {
				t.Errorf("%s = %s, want %s: %v", req, got[req], want, r)
			}
		}
	})
}

// TestHTTP2BetweenSandboxAndGateway: a client that speaks only HTTP/2 (as
// gRPC does) gets it; one that offers both gets HTTP/1.1, which the gateway
// prefers because it relays faster (no HTTP/2 pipes on either side).
func TestHTTP2BetweenSandboxAndGateway(t *testing.T) {
	u := testUpstream(t)
	built, err := netclientBin()
	if err != nil {
		t.Fatal(err)
	}
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		bin := filepath.Join(e.ws, "netclient")
		if err := testutil.CopyFile(built, bin); err != nil {
			t.Fatal(err)
		}
		r := e.run(append(u.flags("--network-mode", mode, "--allow-host", "example.com"), "--", "sh", "-c", `
			echo "h2only $(`+bin+` h2 https://example.com/h2)"
			echo "both $(curl -s --http2 -o /dev/null -w '%{http_version}-%{http_code}' https://example.com/h2)"
			echo "h1 $(curl -s --http1.1 -o /dev/null -w '%{http_version}-%{http_code}' https://example.com/h1)"
			echo END`)...)
		if r.code != 0 || !strings.HasSuffix(r.stdout, "END\n") {
			t.Fatalf("run: %v", r)
		}
		got := fields(r.stdout)
		// The HTTP/1.1 request is the positive control: the same path works,
		// and curl reports the version it spoke.
		if got["h2only"] != "HTTP/2.0-200" || got["both"] != "1.1-200" || got["h1"] != "1.1-200" {
			t.Errorf("HTTP/2 only got %q, curl --http2 (offering both) %q, --http1.1 %q; want HTTP/2.0-200, 1.1-200 and 1.1-200", got["h2only"], got["both"], got["h1"])
		}
	})
}
