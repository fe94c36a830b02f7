//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/sandbox"
	"github.com/airlock-dev/airlock/sandbox/client"
)

// policyScript is the script the end-to-end tests run; TAG is replaced by
// a per-run tag so the upstream's shared log tells runs apart.
const policyScript = `# decides in code what the config does not say
def is_host_allowed(host, port):
    if host == "scripted.test":
        return True
    if host == "vetoed.test":
        return False
    return None

def on_request(req):
    print("on_request", req.method, req.path)
    p = req.path
    if p == "/TAG/strip":
        return {"del_headers": ["authorization"]}
    if p == "/TAG/add":
        return {"set_headers": {"authorization": "Bearer added-by-script"}}
    if p == "/TAG/secret":
        return {"deny": "saw " + req.headers.get("authorization", "nothing")}
    if p == "/TAG/loop":
        for i in range(1 << 40):
            pass
    if p == "/TAG/alloc":
        l = []
        for i in range(1 << 20):
            l.append("x" * (1 << 20))
    if p == "/TAG/undefined":
        return req.nosuch()
    return None

def on_response(resp):
    if resp.status == 400:
        return {"deny": "status %d refused by the script" % resp.status}
    return None
`

// lineOf is the 1-based line of the script's first line containing s.
func lineOf(t *testing.T, src, s string) int {
	for i, l := range strings.Split(src, "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("%q is not in the script", s)
	return 0
}

// A policy script allows a host the config does not and denies one it
// does, strips and adds headers (the upstream's log shows both), refuses a
// response by its status, and never sees a secret's real value; a call that
// loops, allocates without bound or calls something undefined is refused
// with the script's line, and the next request is served (the upstream's
// log shows each one after a failure).
func TestPolicyScriptDecidesHostsRequestsAndResponses(t *testing.T) {
	u := testUpstream(t)
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		tag := fmt.Sprintf("script%d", time.Now().UnixNano())
		src := strings.ReplaceAll(policyScript, "TAG", tag)
		file := filepath.Join(t.TempDir(), "policy.star")
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		ip := strings.Split(u.addr, ":")[0]
		real := fmt.Sprintf("sk-canary-%d-script", os.Getpid())
		curl := func(label, url string, args ...string) string {
			return fmt.Sprintf("echo \"%s $(curl -s -o /dev/null -w '%%{http_code}' %s %s)\"\n", label, strings.Join(args, " "), url)
		}
		ex := "https://example.com/" + tag
		sh := curl("scripted", "http://scripted.test/"+tag+"/scripted") +
			curl("vetoed", "http://vetoed.test/"+tag+"/vetoed") +
			curl("keep", ex+"/keep", "-H", "'Authorization: Bearer keepme'") +
			curl("strip", ex+"/strip", "-H", "'Authorization: Bearer keepme'") +
			curl("add", ex+"/add") +
			"curl -s -H \"Authorization: Bearer $API_KEY\" " + ex + "/secret; echo\n" +
			curl("status400", "https://example.com/ws") +
			"curl -s " + ex + "/loop; echo\n" + curl("after-loop", ex+"/after-loop") +
			curl("alloc", ex+"/alloc") + curl("after-alloc", ex+"/after-alloc") +
			"curl -s " + ex + "/undefined; echo\n" + curl("after-undefined", ex+"/after-undefined")
		c := e.cmd(append(u.flags("--network-mode", mode, "--keep", "--name", "scripted", "--policy-script", file,
			"--allow-host", "example.com", "--allow-host", "vetoed.test", "--secret", "API_KEY@example.com",
			"--add-host", "scripted.test:"+ip, "--add-host", "vetoed.test:"+ip), "--", "sh", "-c", sh)...)
		c.Env = e.environ("API_KEY=" + real)
		r := e.runCmd(c)
		got := u.received(t)
		// A denied connection is a 403 through the proxy, a reset through the transparent door.
		if !strings.Contains(r.stdout, "vetoed 403\n") && !strings.Contains(r.stdout, "vetoed 000\n") {
			t.Errorf("the host the script vetoes was not refused: %v", r)
		}
		for _, want := range []string{"scripted 200", "keep 200", "strip 200", "add 200", "after-loop 200", "after-alloc 200", "after-undefined 200",
			"status400 403", "alloc 403"} {
			if !strings.Contains(r.stdout, want+"\n") {
				t.Errorf("want %q: %v", want, r)
			}
		}
		for _, want := range []string{
			"GET /" + tag + "/scripted \n",                                                                       // a host only the script allows
			"GET /" + tag + "/keep Bearer keepme\n",                                                              // the positive control: the header passes
			"GET /" + tag + "/strip \n",                                                                          // the script stripped it
			"GET /" + tag + "/add Bearer added-by-script\n",                                                      // the script added it
			"GET /" + tag + "/after-loop ", "GET /" + tag + "/after-alloc ", "GET /" + tag + "/after-undefined ", // still serving
		} {
			if !strings.Contains(got, want) {
				t.Errorf("the upstream did not log %q:\n%s\nrun: %v", want, got, r)
			}
		}
		for _, never := range []string{"/vetoed", "/loop", "/alloc", "/undefined", "/secret"} {
			if strings.Contains(got, tag+never) {
				t.Errorf("%s reached the upstream though the script refused it:\n%s", never, got)
			}
		}
		// Refusals name the script's line.
		for _, want := range []string{
			fmt.Sprintf("policy.star:%d: on_request: stopped: over its limit of", lineOf(t, src, "for i in range(1 << 40)")),
			fmt.Sprintf("policy.star:%d: on_request: struct has no .nosuch", lineOf(t, src, "req.nosuch()")),
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("no refusal naming %q: %v", want, r)
			}
		}
		// The script saw the placeholder, never the value.
		if !strings.Contains(r.stdout, "saw Bearer airlock-ph-") {
			t.Errorf("the script's denial should quote the placeholder it saw: %v", r)
		}
		au := e.run("audit", "--json", "scripted")
		for _, out := range []string{r.stdout, r.stderr, au.stdout, au.stderr} {
			if strings.Contains(out, real) {
				t.Fatalf("the real secret value reached the script's output or the audit: %s", out)
			}
		}
		for _, want := range []string{`"rule":"script:` + file + `:on_request"`, `"decision":"print"`, fmt.Sprintf(`policy.star:%d`, lineOf(t, src, "l.append("))} {
			if !strings.Contains(au.stdout, want) {
				t.Errorf("the audit lacks %q:\n%s", want, au.stdout)
			}
		}
	})
}

// A script that does not parse, or names something undefined, or lies
// where the sandbox can write, stops the start with one line (exit 125);
// the same run with a good script starts (the positive control).
func TestPolicyScriptBadInput(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.star", "def is_host_allowed(host, port):\n    return None\n")
	inWS := filepath.Join(e.ws, "p.star")
	os.WriteFile(inWS, []byte("def is_host_allowed(host, port):\n    return True\n"), 0o644)
	for _, c := range []struct {
		name, file, want string
	}{
		{"does not parse", write("bad.star", "def on_request(req):\n    return (\n"), "bad.star:3:"},
		{"undefined name", write("undef.star", "def on_request(req):\n    return nosuch\n"), "undef.star:2: undefined: nosuch"},
		{"load", write("load.star", "load('x.star', 'y')\n"), "load.star:1: load is not available"},
		{"no hook", write("none.star", "x = 1\n"), "defines none of"},
		{"missing", filepath.Join(dir, "nosuch.star"), "nosuch.star"},
		{"in the workspace", inWS, "which the sandbox can write"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.run("run", "-q", "--policy-script", c.file, "--", "echo", "started")
			first, _, _ := strings.Cut(r.stderr, "\n")
			if r.code != 125 || !strings.Contains(first, c.want) || strings.Contains(r.stdout, "started") {
				t.Errorf("--policy-script %s = %v; want exit 125 and one line with %q", c.file, r, c.want)
			}
		})
	}
	if r := e.run("run", "-q", "--policy-script", good, "--", "echo", "started"); r.code != 0 || r.stdout != "started\n" {
		t.Errorf("a good script (the positive control) = %v", r)
	}
}

// create takes network.policy_script: the script allows a host no rule
// names and refuses a path of an allowed one (the upstream's log shows
// only the first); a script inside the workspace is refused with -32602.
func TestRPCPolicyScript(t *testing.T) {
	u := testUpstream(t)
	e := newEnv(t)
	tag := fmt.Sprintf("rpcscript%d", time.Now().UnixNano())
	file := filepath.Join(t.TempDir(), "rpc.star")
	os.WriteFile(file, []byte(`def is_host_allowed(host, port):
    return True if host == "scripted.test" else None

def on_request(req):
    if req.path.endswith("/refused"):
        return False
`), 0o644)
	ip := strings.Split(u.addr, ":")[0]
	sb := newRPCClient(t, e, &sandbox.Config{Network: &sandbox.NetworkConfig{
		AllowedHosts: []string{"example.com"},
		AddHosts:     []string{"example.com:" + ip, "scripted.test:" + ip},
		UpstreamCA:   u.caFile,
		PolicyScript: file,
	}})
	r, err := sb.Exec(fmt.Sprintf(`curl -s -o /dev/null -w "scripted %%{http_code}\n" http://scripted.test/%s/ok; curl -s -o /dev/null -w "refused %%{http_code}\n" https://example.com/%s/refused`, tag, tag))
	if err != nil {
		t.Fatal(err)
	}
	got := u.received(t)
	if !strings.Contains(r.Stdout, "scripted 200") || !strings.Contains(got, "GET /"+tag+"/ok") {
		t.Errorf("the host the script allows was not reached: %q\n%s", r.Stdout, got)
	}
	if !strings.Contains(r.Stdout, "refused 403") || strings.Contains(got, tag+"/refused") {
		t.Errorf("the request the script refuses got through: %q\n%s", r.Stdout, got)
	}
	sb.Close()

	in := filepath.Join(e.ws, "p.star")
	os.WriteFile(in, []byte("def is_host_allowed(h, p):\n    return True\n"), 0o644)
	_, err = client.New(context.Background(), &sandbox.Config{Network: &sandbox.NetworkConfig{PolicyScript: in},
		VFS: &sandbox.VFSConfig{Mounts: map[string]sandbox.Mount{"/workspace": {Type: "real_fs", HostPath: e.ws}}}},
		client.Options{Binary: airlockBin, Env: e.environ()})
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Code != -32602 || !strings.Contains(se.Message, "which the sandbox can write") {
		t.Errorf("a script in the workspace = %v; want -32602 naming why", err)
	}
}

// A repository's .airlock.yaml names a policy script only once trusted, and
// never one in the workspace (the sandbox could rewrite what the next run
// obeys): untrusted, the script is ignored (the host it would allow stays
// refused); trusted and in the workspace, the start stops at the file's
// line; trusted and kept in the config dir, it is obeyed (the upstream's
// log shows the host it allows reached).
func TestPolicyScriptFromARepositoryFile(t *testing.T) {
	u := testUpstream(t)
	e := newEnv(t)
	tag := fmt.Sprintf("reposcript%d", time.Now().UnixNano())
	allow := []byte("def is_host_allowed(host, port):\n    return True if host == \"example.com\" else None\n")
	inWS := filepath.Join(e.ws, "policy.star")
	os.WriteFile(inWS, allow, 0o644)
	repo := filepath.Join(e.ws, ".airlock.yaml")
	os.WriteFile(repo, []byte("network:\n  policy_script: policy.star\n"), 0o644)
	get := func(path string) result {
		return e.run(append(u.flags("--"), "sh", "-c", "curl -s -o /dev/null -w '%{http_code}\\n' --max-time 20 https://example.com/"+tag+path)...)
	}
	r := get("/untrusted")
	if strings.Contains(u.received(t), tag+"/untrusted") {
		t.Errorf("an untrusted repository file's script allowed a host: %v", r)
	}
	if r := e.run("trust"); r.code != 0 {
		t.Fatalf("trust: %v", r)
	}
	r = get("/in-workspace")
	if first, _, _ := strings.Cut(r.stderr, "\n"); r.code != 125 || !strings.Contains(first, ".airlock.yaml:2: network.policy_script") || !strings.Contains(first, "which the sandbox can write") {
		t.Errorf("a trusted file naming a script in the workspace = %v; want exit 125 naming its line", r)
	}
	cfg := filepath.Join(e.home, ".config", "airlock", "policy.star")
	os.WriteFile(cfg, allow, 0o644)
	os.WriteFile(repo, []byte("network:\n  policy_script: "+cfg+"\n"), 0o644)
	if r := e.run("trust"); r.code != 0 {
		t.Fatalf("trust: %v", r)
	}
	r = get("/trusted")
	if r.code != 0 || !strings.Contains(u.received(t), "GET /"+tag+"/trusted ") {
		t.Errorf("a trusted file's script kept in the config dir was not obeyed: %v", r)
	}
}
