package engine

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/config"
)

func TestRunDirFitsWhereTheControlSocketFits(t *testing.T) {
	for ctl, want := range map[string]string{
		"/s/sandboxes/0123456789ab/ctl.sock": "/s/sandboxes/0123456789ab/g",
		"/tmp/airlock-0/s/0123456789ab.sock": "/tmp/airlock-0/s/0123456789ab.g",
	} {
		if got := runDir(ctl); got != want {
			t.Errorf("runDir(%q) = %q, want %q", ctl, got, want)
		}
		if sock := filepath.Join(runDir(ctl), "s"); len(sock) > len(ctl) { // the docker backend's socket name
			t.Errorf("%s is longer than %s", sock, ctl)
		}
	}
}

func TestGatewaySocketFitsWhereTheControlSocketFits(t *testing.T) {
	for ctl, want := range map[string]string{
		"/s/sandboxes/0123456789ab/ctl.sock": "/s/sandboxes/0123456789ab/gw.sock",
		"/tmp/airlock-0/s/0123456789ab.sock": "/tmp/airlock-0/s/0123456789ab.gw",
	} {
		if got := gatewaySocket(ctl); got != want || len(got) > len(ctl) {
			t.Errorf("gatewaySocket(%q) = %q, want %q (no longer than it)", ctl, got, want)
		}
	}
}

func TestNetworkModeFollowsTheBackendsCaps(t *testing.T) {
	link := backend.Caps{}
	noLink := backend.Caps{NoLink: "no TAP device for this user"}
	cases := map[string]struct {
		requested string
		caps      backend.Caps
		want, err string
	}{
		"auto with a link is transparent":        {"", link, config.ModeTransparent, ""},
		"auto without a link is the proxy":       {config.ModeAuto, noLink, config.ModeProxy, ""},
		"transparent without a link is an error": {config.ModeTransparent, noLink, "", "no TAP device"},
		"transparent with a link":                {config.ModeTransparent, link, config.ModeTransparent, ""},
		"proxy whatever the backend":             {config.ModeProxy, link, config.ModeProxy, ""},
		"an unknown mode names the choices":      {"tap", link, "", "use auto, transparent or proxy"},
	}
	for name, c := range cases {
		got, err := networkMode(c.requested, c.caps)
		if got != c.want || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: networkMode(%q) = %q, %v; want %q, %q", name, c.requested, got, err, c.want, c.err)
		}
	}
}

func TestBackendForNamesTheChoices(t *testing.T) {
	for _, name := range []string{config.BackendNative, config.BackendDocker} {
		b, err := backendFor(name, "", nil)
		if err != nil || b.Name() != name {
			t.Errorf("backendFor(%q) = %v, %v", name, b, err)
		}
	}
	if _, err := backendFor("vmware", "", nil); err == nil || !strings.Contains(err.Error(), "use native, docker, vm or kubernetes") {
		t.Errorf("backendFor(vmware) error = %v", err)
	}
}
