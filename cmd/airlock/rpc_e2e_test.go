//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/testutil"
	"github.com/airlock-dev/airlock/sandbox"
	"github.com/airlock-dev/airlock/sandbox/client"
)

func newRPCClient(t *testing.T, e *env, c *sandbox.Config) *client.Sandbox {
	t.Helper()
	sb, err := client.New(context.Background(), c, client.Options{Binary: airlockBin, Env: e.environ()})
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

// collect gathers a client's events in the background.
type collected struct {
	mu     sync.Mutex
	events []sandbox.Event
	done   chan struct{}
}

func collect(ch <-chan sandbox.Event) *collected {
	c := &collected{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for e := range ch {
			c.mu.Lock()
			c.events = append(c.events, e)
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *collected) has(f func(sandbox.Event) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.events {
		if f(e) {
			return true
		}
	}
	return false
}

func TestRPCGoClientEveryMethod(t *testing.T) {
	e := newEnv(t)
	hostDir := filepath.Join(e.ws, "data")
	os.MkdirAll(hostDir, 0o755)
	os.WriteFile(filepath.Join(hostDir, "in.txt"), []byte("from the host"), 0o644)
	sb := newRPCClient(t, e, &sandbox.Config{
		Resources: &sandbox.Resources{MemoryMB: 512},
		VFS: &sandbox.VFSConfig{
			Mounts:       map[string]sandbox.Mount{"/workspace": {Type: "memory"}},
			DirectMounts: map[string]sandbox.DirectMount{"/mnt/data": {HostPath: hostDir, Readonly: true}},
		},
		Env: map[string]string{"GREETING": "hello"},
	})
	ev := collect(sb.Events())
	if sb.Info().Env["GREETING"] != "hello" || sb.Info().Workspace != "/workspace" {
		t.Fatalf("create result = %+v", sb.Info())
	}
	r, err := sb.Exec("echo $GREETING; pwd; cat /mnt/data/in.txt; echo oops >&2; exit 7")
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 7 || r.Stdout != "hello\n/workspace\nfrom the host" || r.Stderr != "oops\n" {
		t.Fatalf("Exec = %+v", r)
	}
	ctx := context.Background()
	var chunks [3]string // each stream in order; the pipes' relative order is the kernel's
	sr, err := sb.ExecStream(ctx, sandbox.ExecRequest{Command: "for i in 1 2 3; do echo $i; sleep 0.05; done; echo e >&2"}, func(stream int, b []byte) {
		chunks[stream] += string(b)
	})
	if err != nil || sr.ExitCode != 0 {
		t.Fatalf("ExecStream = %+v, %v", sr, err)
	}
	if chunks[sandbox.Stdout] != "1\n2\n3\n" || chunks[sandbox.Stderr] != "e\n" {
		t.Fatalf("ExecStream chunks = %q", chunks)
	}
	payload := bytes.Repeat([]byte{0, 1, 2, 255}, 1<<16)
	if err := sb.WriteFile("/workspace/dir/bin.dat", payload); err != nil {
		t.Fatal(err)
	}
	got, err := sb.ReadFile("/workspace/dir/bin.dat")
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("ReadFile: %d bytes, %v", len(got), err)
	}
	files, err := sb.ListFiles("/workspace/dir")
	if err != nil || len(files) != 1 || files[0].Name != "bin.dat" || files[0].Size != int64(len(payload)) || files[0].Mode != 0o644 {
		t.Fatalf("ListFiles = %+v, %v", files, err)
	}
	if _, err := sb.ReadFile("/workspace/missing"); !errors.Is(err, &sandbox.Error{Kind: sandbox.KindNotFound}) {
		t.Fatalf("ReadFile(missing) = %v, want kind not_found", err)
	}
	if err := sb.WriteFile("/mnt/data/x", []byte("x")); !errors.Is(err, &sandbox.Error{Kind: sandbox.KindPermission}) {
		t.Fatalf("WriteFile(read-only mount) = %v, want kind permission", err)
	}
	if _, err := sb.Exec("rm /workspace/dir/bin.dat"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return ev.has(func(e sandbox.Event) bool {
			return e.File != nil && e.File.Op == "delete" && e.File.Path == "/workspace/dir/bin.dat"
		})
	})
	for _, want := range []func(sandbox.Event) bool{
		func(e sandbox.Event) bool {
			return e.File != nil && e.File.Op == "write" && e.File.Path == "/workspace/dir/bin.dat"
		},
		func(e sandbox.Event) bool { return e.Exec != nil && e.Exec.Phase == "exit" && e.Exec.ExitCode == 7 },
	} {
		if !ev.has(want) {
			t.Errorf("events lack one; got %+v", ev.events)
		}
	}
	if err := sb.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	<-ev.done
	if _, err := sb.Exec("true"); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Exec after Close = %v, want ErrClosed", err)
	}
}

func TestRPCConfigErrorsAreInvalidParams(t *testing.T) {
	e := newEnv(t)
	for name, c := range map[string]*sandbox.Config{
		"unknown mount type":  {VFS: &sandbox.VFSConfig{Mounts: map[string]sandbox.Mount{"/s3": {Type: "s3"}}}},
		"policy script":       {Network: &sandbox.NetworkConfig{PolicyScript: "def f(): pass"}},
		"relative mount path": {VFS: &sandbox.VFSConfig{Mounts: map[string]sandbox.Mount{"data": {Type: "memory"}}}},
		"missing host path":   {VFS: &sandbox.VFSConfig{DirectMounts: map[string]sandbox.DirectMount{"/d": {HostPath: "/nonexistent/x"}}}},
		"secret without host": {Network: &sandbox.NetworkConfig{Secrets: map[string]sandbox.Secret{"K": {Value: "abcdefgh"}}}},
	} {
		_, err := client.New(context.Background(), c, client.Options{Binary: airlockBin, Env: e.environ()})
		var se *sandbox.Error
		if !errors.As(err, &se) || se.Code != -32602 || se.Kind != sandbox.KindInvalidConfig {
			t.Errorf("%s: New = %v, want -32602 invalid_config", name, err)
		}
	}
}

// TestRPCNetworkEventsAndSecrets: a secret given by value reaches only its
// host; the sandbox sees the placeholder; every request is an event.
func TestRPCNetworkEventsAndSecrets(t *testing.T) {
	u := testUpstream(t)
	e := newEnv(t)
	const value = "sk-real-value-1234567890"
	sb := newRPCClient(t, e, &sandbox.Config{
		Network: &sandbox.NetworkConfig{
			AllowedHosts: []string{"example.com"},
			AddHosts:     []string{"example.com:" + strings.Split(u.addr, ":")[0]},
			UpstreamCA:   u.caFile,
			Secrets:      map[string]sandbox.Secret{"API_KEY": {Value: value, Hosts: []string{"example.com"}}},
		},
		Env: map[string]string{"API_KEY": "${API_KEY}", "OTHER": "x${API_KEY}y"},
	})
	ev := collect(sb.Events())
	ph := sb.Info().Env["API_KEY"]
	if ph == "" || strings.Contains(ph, value) || sb.Info().Env["OTHER"] != "x"+ph+"y" {
		t.Fatalf("env = %v", sb.Info().Env)
	}
	r, err := sb.Exec(`curl -sS -H "Authorization: Bearer $API_KEY" https://example.com/v1/chat; curl -sS -m 5 https://denied.example.org/ >/dev/null 2>&1; echo rc=$?`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.Stdout, value) || !strings.Contains(r.Stdout, "echo Bearer "+ph) {
		t.Fatalf("sandbox saw %q; want the placeholder echoed back", r.Stdout)
	}
	if !strings.Contains(u.received(t), "Bearer "+value) {
		t.Fatalf("upstream did not get the real value")
	}
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return ev.has(func(e sandbox.Event) bool {
			n := e.Network
			return n != nil && n.Method == "GET" && n.URL == "https://example.com/v1/chat" && n.StatusCode == 200 && !n.Blocked
		})
	})
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return ev.has(func(e sandbox.Event) bool {
			return e.Network != nil && e.Network.Blocked && strings.Contains(e.Network.Host, "denied.example.org")
		})
	})
	sb.Close()
	<-ev.done
	for _, e := range ev.events {
		if b, _ := json.Marshal(e); bytes.Contains(b, []byte(value)) {
			t.Fatalf("an event carries the secret: %s", b)
		}
	}
}

// A tunnel host given to create is reached with the upstream's own
// certificate (curl inside trusts only it); a secret toward a tunnel host is
// invalid params, in config's words.
func TestRPCTunnelHostCarriesTheUpstreamsOwnTLS(t *testing.T) {
	const ip = "127.0.0.53"
	caPEM := tunnelUpstream(t, ip)
	e := newEnv(t)
	_, err := client.New(context.Background(), &sandbox.Config{Network: &sandbox.NetworkConfig{
		TunnelHosts: []string{"example.com"},
		Secrets:     map[string]sandbox.Secret{"K": {Value: "abcdefgh", Hosts: []string{"example.com"}}},
	}}, client.Options{Binary: airlockBin, Env: e.environ()})
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Code != -32602 || se.Kind != sandbox.KindInvalidConfig || !strings.Contains(se.Message, "secret K goes to example.com: a tunnel cannot swap secrets in") {
		t.Errorf("a secret toward a tunnel host: New = %v, want -32602 invalid_config saying why", err)
	}
	sb := newRPCClient(t, e, &sandbox.Config{Network: &sandbox.NetworkConfig{
		TunnelHosts: []string{"example.com"},
		AddHosts:    []string{"example.com:" + ip},
	}})
	if err := sb.WriteFile("/workspace/upstream.pem", caPEM); err != nil {
		t.Fatal(err)
	}
	r, err := sb.Exec(`curl -sS -v --cacert upstream.pem https://example.com/ 2>/tmp/err; grep -o "issuer: .*" /tmp/err`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Stdout, "tunnelled to the upstream itself") || !strings.Contains(r.Stdout, "issuer: O=Acme Co") {
		t.Fatalf("through the tunnel, want the upstream's answer and certificate: %+v", r)
	}
}

// rpcProc is airlock rpc driven line by line, for hostile input.
type rpcProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	lines chan map[string]any
}

func startRPC(t *testing.T, e *env, flags ...string) *rpcProc {
	t.Helper()
	c := e.cmd(append([]string{"rpc"}, flags...)...)
	c.Stderr = os.Stderr
	in, _ := c.StdinPipe()
	out, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	p := &rpcProc{t: t, cmd: c, in: in, out: bufio.NewReaderSize(out, 1<<20), lines: make(chan map[string]any, 1024)}
	go func() {
		defer close(p.lines)
		for {
			l, err := p.out.ReadBytes('\n')
			if err != nil {
				return
			}
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				t.Errorf("airlock rpc wrote a line that is not JSON: %q", l)
				continue
			}
			p.lines <- m
		}
	}()
	t.Cleanup(func() {
		// End of input ends the session cleanly; kill only a hung one.
		in.Close()
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			c.Process.Kill()
			<-done
		}
	})
	return p
}

func (p *rpcProc) send(s string) {
	if _, err := io.WriteString(p.in, s+"\n"); err != nil {
		p.t.Fatalf("write: %v", err)
	}
}

// reply waits for the response with id (skipping events).
func (p *rpcProc) reply(id any) map[string]any {
	p.t.Helper()
	want, _ := json.Marshal(id)
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("airlock rpc ended before replying to %s", want)
			}
			if got, _ := json.Marshal(m["id"]); m["method"] == nil && string(got) == string(want) {
				return m
			}
		case <-timeout:
			p.t.Fatalf("no reply to %s", want)
		}
	}
}

func errCode(m map[string]any) (int, string) {
	e, _ := m["error"].(map[string]any)
	if e == nil {
		return 0, ""
	}
	kind := ""
	if d, ok := e["data"].(map[string]any); ok {
		kind, _ = d["kind"].(string)
	}
	return int(e["code"].(float64)), kind
}

func TestRPCBadInputGetsCleanErrors(t *testing.T) {
	e := newEnv(t)
	p := startRPC(t, e)
	for _, tc := range []struct {
		line string
		id   any
		code int
	}{
		{`{"jsonrpc":"2.0","method":"exec",`, nil, -32700},
		{`[1,2]`, nil, -32600},
		{`"just a string"`, nil, -32600},
		{`{"jsonrpc":"1.0","method":"exec","id":1}`, 1, -32600},
		{`{"jsonrpc":"2.0","id":2}`, 2, -32600},
		{`{"jsonrpc":"2.0","method":"format_disk","id":3}`, 3, -32601},
		{`{"jsonrpc":"2.0","method":"exec","params":[1],"id":4}`, 4, -32602},
		{`{"jsonrpc":"2.0","method":"create","params":{"resources":{"cpus":"many"}},"id":5}`, 5, -32602},
		{`{"jsonrpc":"2.0","method":"create","params":{"network":{"block_private_ips":false}},"id":"s"}`, "s", -32602},
		{`{"jsonrpc":"2.0","method":"exec","params":{"command":"true"},"id":{"x":1}}`, nil, -32600},
		{`{"jsonrpc":"2.0","method":"exec","params":{"command":"true"},"id":6}`, 6, -32000},
	} {
		p.send(tc.line)
		if code, _ := errCode(p.reply(tc.id)); code != tc.code {
			t.Errorf("%s: code %d, want %d", tc.line, code, tc.code)
		}
	}
	// An oversized line is refused without being held, and the session goes on.
	big := `{"jsonrpc":"2.0","method":"write_file","params":{"path":"/x","content":"` + strings.Repeat("A", 25<<20) + `"},"id":7}`
	p.send(big)
	if code, _ := errCode(p.reply(nil)); code != -32600 {
		t.Errorf("oversized line: code %d, want -32600", code)
	}
	p.send(`{"jsonrpc":"2.0","method":"create","params":{},"id":8}`)
	if r := p.reply(8); r["error"] != nil {
		t.Fatalf("create after bad input: %v", r)
	}
	p.send(`{"jsonrpc":"2.0","method":"create","params":{},"id":9}`)
	if _, kind := errCode(p.reply(9)); kind != sandbox.KindExists {
		t.Errorf("second create: kind %q, want %s", kind, sandbox.KindExists)
	}
	p.send(`{"jsonrpc":"2.0","method":"write_file","params":{"path":"/workspace/a","content":"not base64!"},"id":10}`)
	if code, _ := errCode(p.reply(10)); code != -32602 {
		t.Errorf("bad base64: code %d, want -32602", code)
	}
	p.send(`{"jsonrpc":"2.0","method":"exec","params":{"command":"echo ok"},"id":11}`)
	r := p.reply(11)
	res, _ := r["result"].(map[string]any)
	if out, _ := base64.StdEncoding.DecodeString(fmt.Sprint(res["stdout"])); string(out) != "ok\n" {
		t.Fatalf("exec after bad input: %v", r)
	}
	p.send(`{"jsonrpc":"2.0","method":"close","id":12}`)
	if r := p.reply(12); r["error"] != nil {
		t.Fatalf("close: %v", r)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("airlock rpc after close: %v", err)
	}
}

// TestRPCStdinClosedMidCallLeavesNothing: the client vanishes while a
// command runs: airlock rpc tears the sandbox down and exits, and no
// process or cgroup of it is left.
func TestRPCStdinClosedMidCallLeavesNothing(t *testing.T) {
	e := newEnv(t)
	p := startRPC(t, e)
	marker := fmt.Sprintf("%d.%d", 5000+os.Getpid()%1000, time.Now().UnixNano()%1000)
	p.send(`{"jsonrpc":"2.0","method":"create","params":{},"id":1}`)
	if r := p.reply(1); r["error"] != nil {
		t.Fatalf("create: %v", r)
	}
	p.send(`{"jsonrpc":"2.0","method":"exec","params":{"command":"sleep ` + marker + ` & sleep ` + marker + `; wait"},"id":2}`)
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(testutil.ProcsWith(marker)) >= 2 })
	guest := guestOf(p.cmd.Process.Pid)
	if guest == 0 {
		t.Fatal("the sandbox's guest process was not found: the cgroup check below would test nothing")
	}
	groups := testutil.CgroupNamesOf(guest)
	if os.Getuid() == 0 && (len(groups) == 0 || len(testutil.CgroupDirs(groups[0])) == 0) {
		t.Fatal("positive control: no cgroup of the running sandbox found as root")
	}
	p.in.Close()
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("airlock rpc at end of input: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("airlock rpc did not exit after its stdin closed")
	}
	if n := testutil.ProcsWith(marker); len(n) > 0 {
		t.Fatalf("processes left behind: %v", n)
	}
	if cg := cgroupDirsOf(groups); len(cg) > 0 {
		t.Fatalf("cgroups left behind: %v", cg)
	}
}

// guestOf finds the sandbox guest (airlock guest) whose parent is pid.
func guestOf(pid int) int {
	for _, g := range testutil.ProcsWith("guest") {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", g))
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			return g
		}
	}
	return 0
}

// TestRPCKilledLeavesNoProcess: airlock rpc killed outright (no chance to
// clean up) still takes every sandbox process with it: the guest dies with
// its parent and, as PID 1, takes its namespace along.
func TestRPCKilledLeavesNoProcess(t *testing.T) {
	e := newEnv(t)
	p := startRPC(t, e)
	marker := fmt.Sprintf("%d.%d", 6000+os.Getpid()%1000, time.Now().UnixNano()%1000)
	p.send(`{"jsonrpc":"2.0","method":"create","params":{},"id":1}`)
	if r := p.reply(1); r["error"] != nil {
		t.Fatalf("create: %v", r)
	}
	p.send(`{"jsonrpc":"2.0","method":"exec","params":{"command":"sleep ` + marker + ` & sleep ` + marker + `; wait"},"id":2}`)
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(testutil.ProcsWith(marker)) >= 2 })
	pid := p.cmd.Process.Pid
	guest := guestOf(pid)
	if guest == 0 {
		t.Fatal("the sandbox's guest process was not found: the cgroup check below would test nothing")
	}
	groups := testutil.CgroupNamesOf(guest)
	if os.Getuid() == 0 && (len(groups) == 0 || len(testutil.CgroupDirs(groups[0])) == 0) {
		t.Fatal("positive control: no cgroup of the running sandbox found as root")
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(testutil.ProcsWith(marker)) == 0 })
	if guest == 0 {
		t.Fatal("the sandbox's guest was not found among airlock rpc's children")
	}
	{ // reaped by whoever adopted it: only then is its pid free
		testutil.WaitFor(t, 5*time.Second, func() bool { _, err := os.Stat(fmt.Sprintf("/proc/%d", guest)); return err != nil })
	}
	// Its sandbox is in the state dir, made by rpc, and shows as crashed
	// (the lock died with the process); prune removes it and its cgroups.
	var listed []struct {
		ID     string `json:"id"`
		Origin string `json:"origin"`
		Status struct {
			State string `json:"state"`
		} `json:"status"`
	}
	r := e.run("ls", "--json")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &listed) != nil || len(listed) != 1 {
		t.Fatalf("ls --json after the kill = %d %q, want one sandbox", r.code, r.stdout)
	}
	if listed[0].Origin != "rpc" || listed[0].Status.State != "crashed" {
		t.Fatalf("ls shows %+v, want origin rpc, crashed", listed[0])
	}
	if r := e.run("prune"); r.code != 0 {
		t.Fatalf("prune = %d: %s", r.code, r.stderr)
	}
	if r := e.run("ls", "--json"); strings.Contains(r.stdout, listed[0].ID) {
		t.Fatalf("prune left the crashed sandbox: %s", r.stdout)
	}
	q := startRPC(t, e)
	q.send(`{"jsonrpc":"2.0","method":"create","params":{},"id":1}`)
	if r := q.reply(1); r["error"] != nil {
		t.Fatalf("create after the prune: %v", r)
	}
	if cg := cgroupDirsOf(groups); len(cg) > 0 {
		t.Fatalf("stale cgroups not swept: %v", cg)
	}
}

// TestRPCApprovals: a sandbox created with approvals ask sends an approval
// event when a connection waits; the client's approve (through airlock rpc)
// lets it through, and the resolution is an event too.
func TestRPCApprovals(t *testing.T) {
	u := testUpstream(t)
	e := newEnv(t)
	sb := newRPCClient(t, e, &sandbox.Config{
		Approvals: &sandbox.ApprovalsConfig{Mode: "ask"},
		Network: &sandbox.NetworkConfig{
			AddHosts:   []string{"example.com:" + strings.Split(u.addr, ":")[0]},
			UpstreamCA: u.caFile,
		},
	})
	ev := collect(sb.Events())
	done := make(chan *sandbox.ExecResult, 1)
	go func() {
		r, err := sb.Exec(`curl -sS --max-time 30 https://example.com/rpc-approved`)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	var id string
	testutil.WaitFor(t, 15*time.Second, func() bool {
		return ev.has(func(e sandbox.Event) bool {
			if a := e.Approval; a != nil && a.Phase == "request" && a.Subject == "example.com" {
				id = a.ID
				return true
			}
			return false
		})
	})
	if err := sb.Decide(id, sandbox.ApprovalDecision{Allow: true}); err != nil {
		t.Fatalf("approve through rpc: %v", err)
	}
	if r := <-done; r == nil || r.ExitCode != 0 || !strings.Contains(r.Stdout, "echo") {
		t.Fatalf("curl after the rpc approve: %+v", r)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return ev.has(func(e sandbox.Event) bool {
			a := e.Approval
			return a != nil && a.Phase == "resolved" && a.ID == id && a.Decision == "allow" && a.By == "rpc"
		})
	})
	// A second answer to the same request is refused, in one line.
	if err := sb.Decide(id, sandbox.ApprovalDecision{Allow: false}); err == nil {
		t.Fatal("deciding a decided request again succeeded")
	}
	sb.Close()
	<-ev.done
}

// cgroupDirsOf lists the directories of the named cgroups that exist.
func cgroupDirsOf(names []string) []string {
	var dirs []string
	for _, n := range names {
		dirs = append(dirs, testutil.CgroupDirs(n)...)
	}
	return dirs
}
