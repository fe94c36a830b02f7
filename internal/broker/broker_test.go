package broker

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func info() Info {
	return Info{Sandbox: "sb-123", Network: Network{Mode: "proxy", Default: "deny", AllowHosts: []string{"x.test"},
		Secrets: []Secret{{Name: "API_KEY", Hosts: []string{"api.x.test"}}}}}
}

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(method, srv.URL+path, nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestInfoAnswersTheSandboxAndItsPolicyAsJSON(t *testing.T) {
	resp := get(t, New(info()), "GET", "/v1/info")
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/info = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var got Info
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Sandbox != "sb-123" || got.Network.AllowHosts[0] != "x.test" || got.Network.Secrets[0].Name != "API_KEY" || got.Network.Secrets[0].Hosts[0] != "api.x.test" {
		t.Errorf("info = %+v", got)
	}
}

func TestRepeatedRulesAreListedOnce(t *testing.T) {
	resp := get(t, New(Info{Network: Network{AllowHosts: []string{"a.test", "b.test", "a.test"}}}), "GET", "/v1/info")
	var got Info
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if !slices.Equal(got.Network.AllowHosts, []string{"a.test", "b.test"}) {
		t.Errorf("allow_hosts = %q", got.Network.AllowHosts)
	}
}

func TestEmptyListsAreEmptyArraysNotNull(t *testing.T) {
	resp := get(t, New(Info{Sandbox: "s", Network: Network{Secrets: []Secret{{Name: "A"}}}}), "GET", "/v1/info")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), "null") {
		t.Errorf("body has null: %s", body)
	}
}

func TestOtherMethodsAndPathsAreRefused(t *testing.T) {
	b := New(info())
	for _, c := range []struct {
		method, path string
		want         int
	}{{"POST", "/v1/info", 405}, {"GET", "/v1/other", 404}, {"GET", "/", 404}} {
		resp := get(t, b, c.method, c.path)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s = %d, want %d", c.method, c.path, resp.StatusCode, c.want)
		}
	}
}

func TestHandleMountsAService(t *testing.T) {
	b := New(info())
	b.Handle("/v1/mcp/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "mcp "+r.URL.Path) }))
	resp := get(t, b, "GET", "/v1/mcp/x")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "mcp /v1/mcp/x" {
		t.Errorf("body = %q", body)
	}
}
