//go:build linux

package main

// The broker: inside a sandbox, http(s)://airlock.internal is served by the
// gateway itself, through whichever door the sandbox has.

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestTheBrokerAnswersInsideTheSandbox(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		real := fmt.Sprintf("sk-broker-canary-%d-value", os.Getpid())
		name := "broker-" + mode
		c := e.cmd("run", "-q", "--name", name, "--network-mode", mode, "--allow-host", "x.test", "--secret", "API_KEY@x.test", "--", "sh", "-c", `
		curl -sS --max-time 20 http://airlock.internal/v1/info
		echo ---
		curl -sS --max-time 20 https://AIRLOCK.internal/v1/info`)
		c.Env = e.environ("API_KEY=" + real)
		r := e.runCmd(c)
		if r.code != 0 {
			t.Fatal(r)
		}
		if strings.Contains(r.stdout, real) {
			t.Fatalf("the secret's value reached the sandbox: %v", r)
		}
		var id string
		for _, rec := range auditRecords(t, e, name) {
			id = rec.Sandbox
			if rec.Kind == "http" && rec.Host == "airlock.internal" && (rec.Decision != "allow" || rec.Status != 200) {
				t.Errorf("broker request audited as %+v", rec)
			}
		}
		parts := strings.Split(r.stdout, "---")
		if len(parts) != 2 {
			t.Fatalf("want two answers: %v", r)
		}
		for i, p := range parts {
			var info struct {
				Sandbox string `json:"sandbox"`
				Network struct {
					Mode       string   `json:"mode"`
					AllowHosts []string `json:"allow_hosts"`
					Secrets    []struct {
						Name  string   `json:"name"`
						Hosts []string `json:"hosts"`
					} `json:"secrets"`
				} `json:"network"`
			}
			if err := json.Unmarshal([]byte(p), &info); err != nil {
				t.Fatalf("answer %d is not JSON (%v): %v", i, err, r)
			}
			if info.Sandbox == "" || info.Sandbox != id {
				t.Errorf("answer %d names sandbox %q, the audit log %q", i, info.Sandbox, id)
			}
			if info.Network.Mode != mode || len(info.Network.Secrets) != 1 || info.Network.Secrets[0].Name != "API_KEY" {
				t.Errorf("answer %d: %+v", i, info)
			}
		}
	})
}
