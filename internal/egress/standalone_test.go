package egress

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseListen(t *testing.T) {
	cases := map[string]struct {
		spec, network, addr, err string
	}{
		"unix socket":               {spec: "unix:/run/gw.sock", network: "unix", addr: "/run/gw.sock"},
		"loopback tcp":              {spec: "tcp:127.0.0.1:3128", network: "tcp", addr: "127.0.0.1:3128"},
		"loopback v6, any port":     {spec: "tcp:[::1]:0", network: "tcp", addr: "[::1]:0"},
		"all interfaces is refused": {spec: "tcp:0.0.0.0:3128", err: "loopback only"},
		"a name is refused":         {spec: "tcp:localhost:3128", err: "loopback only"},
		"a LAN address is refused":  {spec: "tcp:192.168.1.2:3128", err: "loopback only"},
		"empty unix path":           {spec: "unix:", err: "use unix:PATH"},
		"no scheme":                 {spec: "127.0.0.1:3128", err: "use unix:PATH"},
	}
	for name, c := range cases {
		network, addr, err := parseListen(c.spec)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: parseListen(%q) error = %v, want %q", name, c.spec, err, c.err)
			}
			continue
		}
		if err != nil || network != c.network || addr != c.addr {
			t.Errorf("%s: parseListen(%q) = %q, %q, %v; want %q, %q", name, c.spec, network, addr, err, c.network, c.addr)
		}
	}
}

func TestReadGatewayConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	n, err := ReadGatewayConfig(write("ok.json", `{"allow_hosts": ["*.github.com"], "secrets": ["K@api.example.com"], "upstream_ca": "ca.pem"}`))
	if err != nil || len(n.AllowHosts) != 1 || len(n.Secrets) != 1 || n.UpstreamCA != filepath.Join(dir, "ca.pem") {
		t.Errorf("ReadGatewayConfig = %+v, %v", n, err)
	}
	for name, body := range map[string]string{
		"unknown field": `{"allow_host": ["x"]}`,
		"not JSON":      `allow_hosts: [x]`,
		"too large":     `{"allow_hosts": ["` + strings.Repeat("a", 1<<20) + `"]}`,
	} {
		if _, err := ReadGatewayConfig(write(strings.ReplaceAll(name, " ", "_")+".json", body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
