//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-dev/airlock/internal/approval"
)

// canaryListener listens on every host address (v4 and v6) and counts the
// connections it accepts: the host-side evidence of what a sandbox reached.
func canaryListener(t *testing.T) (port string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\ncanary")
			c.Close()
		}
	}()
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return port, accepted
}

// hostAddrs are this host's own non-loopback addresses, in URL form.
func hostAddrs(t *testing.T) []string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		if ipn.IP.To4() != nil {
			out = append(out, ipn.IP.String())
		} else {
			out = append(out, "["+ipn.IP.String()+"]")
		}
	}
	return out
}

// probeScript tries http://H:$PORT/ for every H in $HOSTS, the gateway's
// own addresses (the default route and the DNS server) and names that
// resolve to loopback in public DNS, directly and through the proxy when
// there is one (absolute URI and CONNECT, NO_PROXY overridden), and prints
// what answered.
const probeScript = `gw=$(awk '$2=="00000000"{print $3; exit}' /proc/net/route 2>/dev/null)
if [ -n "$gw" ]; then HOSTS="$HOSTS $(printf '%d.%d.%d.%d' 0x${gw:6:2} 0x${gw:4:2} 0x${gw:2:2} 0x${gw:0:2} 2>/dev/null)"; fi
HOSTS="$HOSTS $(awk '/^nameserver/{print $2}' /etc/resolv.conf 2>/dev/null | tr '\n' ' ')"
for h in $HOSTS; do
  u="http://$h:$PORT/"
  c=$(curl -sS --max-time 3 -o /dev/null -w '%{http_code}' --noproxy '*' "$u" 2>/dev/null); echo "direct $h $c"
  if [ -n "$HTTP_PROXY" ]; then
    c=$(curl -sS --max-time 3 -o /dev/null -w '%{http_code}' --noproxy '' -x "$HTTP_PROXY" "$u" 2>/dev/null); echo "proxy $h $c"
    c=$(curl -sS --max-time 3 -o /dev/null -w '%{http_code}' --noproxy '' -p -x "$HTTP_PROXY" "$u" 2>/dev/null); echo "tunnel $h $c"
  fi
done
echo END`

// TestASandboxCannotReachTheApprovalsPage: airlock ui serves on host
// loopback. From inside a sandbox, through both doors, nothing on host
// loopback is reached by any route: 127.0.0.1 and its other spellings,
// ::1, the host's own addresses, the gateway's addresses, airlock.internal,
// public names that resolve to loopback. The judge is a canary listener
// on every host address that counts what it accepts. The control: a name
// the user explicitly maps to 127.0.0.1 (--add-host, --allow-host) does
// reach host loopback; pointed at the page, that DNS-rebinding name is
// refused by the page's Host check, a forged Host lacks the token, and a
// forged decision changes nothing: the request stays pending.
func TestASandboxCannotReachTheApprovalsPage(t *testing.T) {
	u := testUpstream(t)
	canary, accepted := canaryListener(t)
	e := newEnv(t)
	ui := e.cmd("ui")
	out, _ := ui.StdoutPipe()
	ui.Stderr = os.Stderr
	if err := ui.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { ui.Process.Kill(); ui.Wait() }()
	first, err := bufio.NewReader(out).ReadString('\n')
	i := strings.Index(first, "http://")
	if err != nil || i < 0 {
		t.Fatalf("airlock ui printed %q, %v", first, err)
	}
	pu, _ := url.Parse(strings.TrimSpace(first[i:]))
	uiPort := pu.Port()

	hosts := append([]string{"127.0.0.1", "localhost", "[::1]", "127.0.0.2", "0.0.0.0", "2130706433", "0x7f.1",
		"[::ffff:127.0.0.1]", "airlock.internal", "localtest.me", "127.0.0.1.nip.io"}, hostAddrs(t)...)
	eachMode(t, func(t *testing.T, mode string) {
		name := "page-" + mode
		if r := e.run(u.flags("-d", "--name", name, "--network-mode", mode, "--ask",
			"--add-host", "rebind.test:127.0.0.1", "--allow-host", "rebind.test:*")...); r.code != 0 {
			t.Fatalf("run -d: %v", r)
		}
		defer e.run("kill", name)

		before := accepted.Load()
		r := e.run("exec", name, "--", "env", "PORT="+canary, "HOSTS="+strings.Join(hosts, " "), "bash", "-c", probeScript)
		if r.code != 0 || !strings.HasSuffix(r.stdout, "END\n") {
			t.Fatalf("the probe: %v", r)
		}
		t.Logf("what answered (000: nothing):\n%s", r.stdout)
		if n := accepted.Load() - before; n != 0 {
			t.Errorf("a host loopback listener accepted %d connections from the sandbox:\n%s", n, r.stdout)
		}
		for _, line := range strings.Split(r.stdout, "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[2] == "200" {
				t.Errorf("answered 200: %s", line)
			}
		}

		// Control: the explicit mapping reaches host loopback.
		before = accepted.Load()
		if r := e.run("exec", name, "--", "curl", "-sS", "--proxytunnel", "--max-time", "10", "http://rebind.test:"+canary+"/"); r.code != 0 || r.stdout != "canary" || accepted.Load() == before {
			t.Fatalf("the control (rebind.test mapped to 127.0.0.1 on purpose): %v, accepted %d", r, accepted.Load()-before)
		}

		// A pending request, which nothing below may decide.
		wait := e.background("exec", name, "--", "curl", "-sS", "--max-time", "20", "https://example.com/pending")
		req := pendingIn(t, e, "example.com")
		page := "http://rebind.test:" + uiPort
		decide, _ := json.Marshal(map[string]any{"id": req.ID, "allow": true, "scope": "global"})
		for what, argv := range map[string][]string{
			"the page by a rebinding name":     {"curl", "-sS", "--proxytunnel", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", page + "/"},
			"the page with a forged Host":      {"curl", "-sS", "--proxytunnel", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: 127.0.0.1:" + uiPort, page + "/"},
			"a decision with a forged Host":    {"curl", "-sS", "--proxytunnel", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: 127.0.0.1:" + uiPort, "-H", "Origin: http://127.0.0.1:" + uiPort, "-H", "Content-Type: application/json", "-H", "Sec-Fetch-Site: same-origin", "--data", string(decide), page + "/api/decide"},
			"a decision by the rebinding name": {"curl", "-sS", "--proxytunnel", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Content-Type: application/json", "--data", string(decide), page + "/api/decide"},
		} {
			r := e.run(append([]string{"exec", name, "--"}, argv...)...)
			if r.stdout != "421" && r.stdout != "403" {
				t.Errorf("%s: %v, want 421 (wrong Host) or 403 (no token)", what, r)
			}
		}
		if r := e.run("approvals", "--json"); !strings.Contains(r.stdout, req.ID) {
			t.Errorf("the pending request was decided by the sandbox: %v", r)
		}
		e.run("deny", req.ID)
		if r := wait(); r.code == 0 {
			t.Errorf("the request the sandbox tried to approve went through: %v", r)
		}
	})
}

// TestASandboxCannotWriteTheSavedDecisions: the saved decisions live in
// airlock's config dir, which no sandbox sees: writing there from inside,
// with the config dir or its parent given --rw, leaves the host's file as
// it was, and a later run is not allowed what the sandbox wrote.
func TestASandboxCannotWriteTheSavedDecisions(t *testing.T) {
	u := testUpstream(t)
	e := newEnv(t)
	cfg := filepath.Join(e.home, ".config", "airlock")
	os.MkdirAll(cfg, 0o700)
	store := filepath.Join(cfg, approval.StoreFile)
	evil := "version: 1\ndecisions:\n  - {id: r-0000000e, host: example.com, decision: allow, scope: global, created: 2026-01-01T00:00:00Z}\n"
	write := fmt.Sprintf(`mkdir -p %q 2>/dev/null; printf '%%s' %q > %q 2>/dev/null; cat %q 2>/dev/null | head -c 100; echo`, cfg, evil, store, store)
	for what, extra := range map[string][]string{
		"its path":               nil,
		"--rw of the config dir": {"--rw", cfg},
		"--rw of its parent":     {"--rw", filepath.Dir(cfg)},
	} {
		r := e.run(u.flags(append(extra, "--", "sh", "-c", write)...)...)
		if what == "its path" && !strings.Contains(r.stdout, "version: 1") {
			t.Errorf("%s: the write inside did not happen (its private home takes it): %v", what, r)
		}
		if b, err := os.ReadFile(store); err == nil {
			t.Fatalf("%s: the sandbox wrote the saved decisions (%v):\n%s", what, r, b)
		}
	}
	// Nothing was saved: example.com is not allowed by the sandbox's word;
	// the control: allowed by the user, it is reached.
	if r := e.run(u.flags("--", "curl", "-fsS", "--max-time", "10", "https://example.com/")...); r.code == 0 {
		t.Errorf("a later run reached example.com: %v", r)
	}
	if r := e.run(u.flags("--allow-host", "example.com", "--", "curl", "-fsS", "--max-time", "10", "https://example.com/")...); r.code != 0 {
		t.Errorf("the control, example.com allowed: %v", r)
	}
}
