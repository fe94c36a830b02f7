//go:build linux

package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gatewayCmd starts `airlock gateway` and returns its settings by name.
func gatewayCmd(t *testing.T, e *env, extraEnv []string, args ...string) map[string]string {
	t.Helper()
	c := e.cmd(append([]string{"gateway"}, args...)...)
	c.Env = append(c.Env, extraEnv...)
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("airlock gateway did not stop cleanly on SIGTERM: %v; stderr: %s", err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			c.Process.Kill()
			t.Errorf("airlock gateway did not stop within 10s of SIGTERM")
		}
	})
	settings := map[string]string{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		settings[k] = v
		if k == "AIRLOCK_GATEWAY_AUDIT" {
			go io.Copy(io.Discard, out)
			return settings
		}
	}
	t.Fatalf("airlock gateway %v printed no settings; stderr: %s", args, stderr.String())
	return nil
}

func TestGatewayCommandServesAnyClient(t *testing.T) {
	if testBackend() == "docker" {
		t.Skip("no sandbox involved: the native run covers it")
	}
	u := testUpstream(t)
	e := newEnv(t)
	real := fmt.Sprintf("sk-gw-canary-%d", os.Getpid())
	ip := strings.Split(u.addr, ":")[0]
	set := gatewayCmd(t, e, []string{"API_KEY=" + real}, "--listen", "tcp:127.0.0.1:0", "--allow-host", "example.com",
		"--add-host", "example.com:"+ip, "--upstream-ca", u.caFile, "--secret", "API_KEY@example.com")
	proxy, err := url.Parse(set["HTTPS_PROXY"])
	if err != nil || proxy.User == nil {
		t.Fatalf("HTTPS_PROXY %q: %v", set["HTTPS_PROXY"], err)
	}
	if tok, _ := proxy.User.Password(); len(tok) != 64 {
		t.Errorf("token has %d hex digits, want 64 (256 bits)", len(tok))
	}
	placeholder := set["API_KEY"]
	if !strings.HasPrefix(placeholder, "airlock-ph-") || strings.Contains(strings.Join(mapValues(set), " "), real) {
		t.Fatalf("the secret's value leaked into the settings, or no placeholder: %v", set)
	}
	pem, err := os.ReadFile(set["SSL_CERT_FILE"])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	client := func(p *url.URL) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(p), TLSClientConfig: &tls.Config{RootCAs: roots}}}
	}
	req, _ := http.NewRequest("GET", "https://example.com/gw-secret", nil)
	req.Header.Set("Authorization", "Bearer "+placeholder)
	resp, err := client(proxy).Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET through the gateway: %v %v", resp, err)
	}
	resp.Body.Close()
	if got := u.received(t); !strings.Contains(got, "GET /gw-secret Bearer "+real) {
		t.Errorf("upstream should have received the real value; it logged:\n%s", got)
	}
	// Wrong token, no token: 407. Another host: 403.
	wrong := *proxy
	wrong.User = url.UserPassword("airlock", strings.Repeat("0", 64))
	noToken := *proxy
	noToken.User = nil
	for name, p := range map[string]*url.URL{"wrong token": &wrong, "no token": &noToken} {
		if _, err := client(p).Get("https://example.com/"); err == nil || !strings.Contains(err.Error(), "Proxy Authentication Required") {
			t.Errorf("%s: want 407, got %v", name, err)
		}
		resp, err := client(p).Get("http://example.com/")
		if err != nil || resp.StatusCode != 407 {
			t.Errorf("%s, absolute URI: want 407, got %v %v", name, resp, err)
		} else {
			resp.Body.Close()
		}
	}
	if _, err := client(proxy).Get("https://other.test/"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("a host outside the policy: want 403, got %v", err)
	}
	if b, err := os.ReadFile(set["AIRLOCK_GATEWAY_AUDIT"]); err != nil || !strings.Contains(string(b), "example.com") || strings.Contains(string(b), real) {
		t.Errorf("audit log: %v\n%s", err, b)
	}
}

func TestGatewayCommandOnUnixSocket(t *testing.T) {
	if testBackend() == "docker" {
		t.Skip("no sandbox involved: the native run covers it")
	}
	u := testUpstream(t)
	e := newEnv(t)
	sock := filepath.Join(e.home, "gw.sock")
	set := gatewayCmd(t, e, nil, "--listen", "unix:"+sock, "--allow-host", "example.com",
		"--add-host", "example.com:"+strings.Split(u.addr, ":")[0], "--upstream-ca", u.caFile)
	if set["AIRLOCK_PROXY_SOCKET"] != sock || !strings.HasPrefix(set["AIRLOCK_PROXY_AUTHORIZATION"], "Basic ") {
		t.Fatalf("settings: %v", set)
	}
	connect := func(auth string) string {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n")
		if auth != "" {
			fmt.Fprintf(c, "Proxy-Authorization: %s\r\n", auth)
		}
		fmt.Fprintf(c, "\r\n")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(line)
	}
	if got := connect(""); !strings.Contains(got, "407") {
		t.Errorf("CONNECT without the token: %q, want 407", got)
	}
	if got := connect(set["AIRLOCK_PROXY_AUTHORIZATION"]); !strings.Contains(got, "200") {
		t.Errorf("CONNECT with the token: %q, want 200", got)
	}
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode: %v %v, want 0600", st.Mode(), err)
	}
}

func TestGatewayCommandBadInput(t *testing.T) {
	if testBackend() == "docker" {
		t.Skip("no sandbox involved: the native run covers it")
	}
	e := newEnv(t)
	cfg := filepath.Join(e.home, "bad.json")
	os.WriteFile(cfg, []byte(`{"allow_hostz": ["x"]}`), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"gateway", "--allow-host", "x.test"}, "--listen is required"},
		{[]string{"gateway", "--listen", "tcp:0.0.0.0:0", "--allow-host", "x.test"}, "loopback only"},
		{[]string{"gateway", "--listen", "udp:1"}, "unix:PATH or tcp:127.0.0.1:PORT"},
		{[]string{"gateway", "--listen", "tcp:127.0.0.1:0"}, "allow something"},
		{[]string{"gateway", "--listen", "tcp:127.0.0.1:0", "--config", cfg}, "allow_hostz"},
	}
	for _, c := range cases {
		r := e.run(c.args...)
		if r.code != 125 || !strings.Contains(r.stderr, c.want) || !strings.HasPrefix(r.stderr, "airlock: ") {
			t.Errorf("airlock %v = %v, want exit 125 and %q", c.args, r, c.want)
		}
	}
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
