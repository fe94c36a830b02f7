//go:build linux

package main

import (
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/config"
)

// tunnelUpstream is an HTTPS server on ip:443 with httptest's
// certificate (for example.com, issuer "Acme Co"); the returned PEM is that
// certificate, for clients to trust directly.
func tunnelUpstream(t *testing.T, ip string) (caPEM []byte) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("binding the tunnel test server's port 443 needs root")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "443"))
	if err != nil {
		t.Skipf("cannot serve on %s:443: %v", ip, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "tunnelled to the upstream itself\n")
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.TLS.Certificates[0].Certificate[0]})
}

// A tunnel host (intercept: false) is reached with the upstream's own
// certificate: curl inside trusts only that certificate, not airlock's CA,
// and sees its issuer. A ClientHello naming another host is refused. Both
// are audited.
func TestATunnelHostCarriesTheUpstreamsOwnTLS(t *testing.T) {
	const ip = "127.0.0.45"
	caPEM := tunnelUpstream(t, ip)
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		// In the workspace: the sandbox's /tmp is its own.
		if err := os.WriteFile(filepath.Join(e.ws, "upstream.crt"), caPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		const caFile = "upstream.crt"
		name := "tunnel-" + mode
		script := `
		curl -sS -v --cacert ` + caFile + ` https://example.com/ 2>/tmp/err; grep -o "issuer: .*" /tmp/err
		curl -sS -o /dev/null -w "mismatch %{exitcode}\n" --cacert ` + caFile + ` --connect-to other.test:443:example.com:443 https://other.test/ 2>/dev/null
		true`
		r := e.run("run", "-q", "--name", name, "--network-mode", mode, "--tunnel-host", "example.com", "--add-host", "example.com:"+ip, "--", "sh", "-c", script)
		if !strings.Contains(r.stdout, "tunnelled to the upstream itself") || !strings.Contains(r.stdout, "issuer: O=Acme Co") {
			t.Errorf("through the tunnel, want the upstream's answer and certificate: %v", r)
		}
		if strings.Contains(r.stdout, "mismatch 0") || !strings.Contains(r.stdout, "mismatch ") {
			t.Errorf("a ClientHello naming another host got through: %v", r)
		}
		var allowed, denied bool
		for _, rec := range auditRecords(t, e, name) {
			if rec.Kind != "network" || rec.Host != "example.com" {
				continue
			}
			switch {
			case rec.Decision == "allow" && strings.Contains(rec.Reason, "blind TLS tunnel") && rec.BytesIn > 0 && rec.BytesOut > 0:
				allowed = true
			case rec.Decision == "deny" && strings.Contains(rec.Reason, `SNI "other.test"`):
				denied = true
			}
		}
		if !allowed || !denied {
			t.Errorf("audit: want the tunnel (with bytes) and the refused hello; got %+v", auditRecords(t, e, name))
		}
		e.run("rm", name)
	})
}

// Config that puts a secret or an endpoint rule on a tunnel host is refused
// before anything starts.
func TestATunnelHostWithASecretOrEndpointRuleIsRefusedAtLoad(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--tunnel-host", "api.x.test", "--secret", "TOKEN@api.x.test"}, "a tunnel cannot swap secrets in"},
		{[]string{"--tunnel-host", "api.x.test", "--allow-endpoint", "api.x.test GET /*"}, "cannot see requests"},
	} {
		r := e.run(append(append([]string{"run", "-q", "--network-mode", config.ModeProxy}, c.flags...), "--", "true")...)
		if r.code != 125 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: want exit 125 saying %q, got %v", c.flags, c.want, r)
		}
	}
}
