//go:build linux

package main

// The CA in every runtime: real clients that carry roots of their own (a
// JVM, pip, curl) fetch through the intercepting gateway because of the
// variable airlock sets for each, and fail without it.

import (
	"archive/zip"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const probeWheel = "airlock_probe-1.0-py3-none-any.whl"

// pypiIndex serves a PEP 503 simple index with one package, airlock-probe,
// whose only file is a small valid wheel.
func pypiIndex() http.Handler {
	whl := probeWheelBytes()
	mux := http.NewServeMux()
	mux.HandleFunc("/pypi/simple/airlock-probe/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/pypi/files/%s\">%s</a></body></html>\n", probeWheel, probeWheel)
	})
	mux.HandleFunc("/pypi/files/"+probeWheel, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(whl)
	})
	return mux
}

func probeWheelBytes() []byte {
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	files := [][2]string{
		{"airlock_probe/__init__.py", "print('airlock probe')\n"},
		{"airlock_probe-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: airlock-probe\nVersion: 1.0\n"},
		{"airlock_probe-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: airlock-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	record := ""
	for _, f := range files {
		w, _ := z.Create(f[0])
		w.Write([]byte(f[1]))
		record += f[0] + ",,\n"
	}
	w, _ := z.Create("airlock_probe-1.0.dist-info/RECORD")
	w.Write([]byte(record + "airlock_probe-1.0.dist-info/RECORD,,\n"))
	z.Close()
	return buf.Bytes()
}

// fetchJava is a single-file Java program (java Fetch.java URL) that GETs
// URL with java.net.http.HttpClient and prints the body, and the property
// airlock.user (set by the user's own JAVA_TOOL_OPTIONS).
const fetchJava = `import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

public class Fetch {
    public static void main(String[] args) throws Exception {
        HttpClient c = HttpClient.newHttpClient();
        HttpResponse<String> r = c.send(HttpRequest.newBuilder(URI.create(args[0])).build(), HttpResponse.BodyHandlers.ofString());
        System.out.println("java " + r.statusCode() + " " + r.body().trim() + " user=" + System.getProperty("airlock.user"));
    }
}
`

func TestEveryRuntimeTrustsTheGatewaysCAThroughItsOwnVariable(t *testing.T) {
	u := testUpstream(t)
	for _, mode := range networkModes() {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			if err := os.WriteFile(filepath.Join(e.ws, "Fetch.java"), []byte(fetchJava), 0o644); err != nil {
				t.Fatal(err)
			}
			// A bundle without airlock's CA: the control each client is
			// pointed at, to show the variable is what it reads.
			other, err := os.ReadFile(u.caFile)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(e.ws, "other-ca.crt"), other, 0o644); err != nil {
				t.Fatal(err)
			}
			ws := e.ws
			// Java's HttpClient ignores HTTPS_PROXY: through the proxy door
			// it would not reach the gateway at all, so only the transparent
			// network tries it.
			java := mode == "transparent"
			script := `
			for v in PIP_CERT CARGO_HTTP_CAINFO DENO_CERT AWS_CA_BUNDLE NPM_CONFIG_CAFILE CURL_CA_BUNDLE; do echo "$v=$(printenv $v)"; done
			echo "roots $(grep -c 'BEGIN CERTIFICATE' /run/airlock/ca-bundle.pem)"
			test -s /run/airlock/ca-truststore.p12 && echo "truststore present"
			cat /run/airlock/ca-truststore.p12 >> /run/airlock/ca-truststore.p12 2>/dev/null && echo "truststore WRITTEN"
			curl -sS https://example.com/curl-ok
			CURL_CA_BUNDLE=` + ws + `/other-ca.crt curl -sS https://example.com/curl-control 2>/dev/null || echo "curl control failed"
			if python3 -m pip --version >/dev/null 2>&1; then
				pip="python3 -m pip download --no-deps --disable-pip-version-check --no-cache-dir --retries 0 --timeout 20 --index-url https://example.com/pypi/simple/ airlock-probe"
				# requests lets REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE override
				# pip's own --cert: without them PIP_CERT alone decides.
				env -u REQUESTS_CA_BUNDLE -u CURL_CA_BUNDLE $pip -d ` + ws + `/dl >/dev/null 2>pip.err && echo "pip ok" || cat pip.err
				env -u REQUESTS_CA_BUNDLE -u CURL_CA_BUNDLE PIP_CERT=` + ws + `/other-ca.crt $pip -d ` + ws + `/dl-control >/dev/null 2>&1 || echo "pip control failed"
			else
				echo "no pip"
			fi`
			// npm: Node's roots plus NODE_EXTRA_CA_CERTS would do for the
			// registry; NPM_CONFIG_CAFILE replaces them, so a project's
			// .npmrc cafile= cannot break it. The control names another CA.
			script += `
			if command -v npm >/dev/null; then
				npm ping --registry https://example.com/npm-ok/ >/dev/null 2>npm.err && echo "npm ok" || cat npm.err
				env -u NPM_CONFIG_CAFILE npm ping --registry https://example.com/npm-node/ >/dev/null 2>&1 && echo "npm with node's roots ok"
				NPM_CONFIG_CAFILE=` + ws + `/other-ca.crt npm ping --fetch-retries=0 --registry https://example.com/npm-control/ >/dev/null 2>&1 || echo "npm control failed"
			else
				echo "no npm"
			fi`
			if java {
				script += `
			if command -v java >/dev/null; then
				java Fetch.java https://example.com/java-ok 2>java.err || cat java.err
				env -u JAVA_TOOL_OPTIONS java Fetch.java https://example.com/java-control >/dev/null 2>java-control.err || echo "java control failed: $(grep -o 'PKIX path building failed' java-control.err | head -1)"
			else
				echo "no java"
			fi`
			}
			r := e.run(append(u.flags("--network-mode", mode, "--allow-host", "example.com", "--env", "JAVA_TOOL_OPTIONS=-Dairlock.user=kept"), "--", "sh", "-c", script)...)
			t.Log(r.stdout)
			for _, v := range []string{"PIP_CERT", "CARGO_HTTP_CAINFO", "DENO_CERT", "AWS_CA_BUNDLE", "NPM_CONFIG_CAFILE", "CURL_CA_BUNDLE"} {
				if !strings.Contains(r.stdout, v+"=/run/airlock/ca-bundle.pem\n") {
					t.Errorf("%s is not the bundle: %v", v, r)
				}
			}
			// The bundle adds airlock's CA to the system's roots.
			if m := regexp.MustCompile(`roots (\d+)`).FindStringSubmatch(r.stdout); m == nil || func() bool { n, _ := strconv.Atoi(m[1]); return n < 2 }() {
				t.Errorf("the bundle should hold the system's roots plus airlock's CA: %v", r)
			}
			if strings.Contains(r.stdout, "WRITTEN") {
				t.Errorf("the sandbox wrote the shared trust store: %v", r)
			}
			for _, w := range []string{"truststore present", "echo \n", "curl control failed"} {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("missing %q in %v", w, r)
				}
			}
			log := u.received(t)
			if !strings.Contains(log, "GET /curl-ok ") || strings.Contains(log, "GET /curl-control ") {
				t.Errorf("the upstream's log should show curl's fetch and not its control's:\n%s", log)
			}
			if strings.Contains(r.stdout, "no pip") {
				t.Log("pip is not installed here (apt: python3-pip): pip not tried")
			} else {
				got, err := os.ReadFile(filepath.Join(e.ws, "dl", probeWheel))
				if err != nil || !bytes.Equal(got, probeWheelBytes()) {
					t.Errorf("pip download left no wheel (or another) on the host: %v\n%v", err, r)
				}
				if _, err := os.Stat(filepath.Join(e.ws, "dl-control", probeWheel)); err == nil || !strings.Contains(r.stdout, "pip control failed") {
					t.Errorf("pip with PIP_CERT naming a bundle without airlock's CA still downloaded: %v", r)
				}
			}
			if strings.Contains(r.stdout, "no npm") {
				t.Log("npm is not installed here: npm not tried")
			} else if !strings.Contains(r.stdout, "npm ok") || !strings.Contains(r.stdout, "npm control failed") || !strings.Contains(r.stdout, "npm with node's roots ok") ||
				!strings.Contains(log, "GET /npm-ok/") || strings.Contains(log, "GET /npm-control/") {
				t.Errorf("want npm to reach the registry with NPM_CONFIG_CAFILE and fail with another CA: %v\n%s", r, log)
			}
			if !java {
				return
			}
			if strings.Contains(r.stdout, "no java") {
				if _, err := exec.LookPath("java"); err == nil && testBackend() == "" {
					t.Fatalf("java is on the host but not in the sandbox: %v", r)
				}
				t.Skip("no JDK here (apt: openjdk-17-jdk-headless)")
			}
			// The user's own JAVA_TOOL_OPTIONS are kept (airlock's follow).
			if !strings.Contains(r.stdout, "java 200 echo user=kept") || !strings.Contains(r.stdout, "java control failed: PKIX path building failed") {
				t.Errorf("want the JVM to fetch with airlock's trust store and fail (PKIX) without it: %v", r)
			}
			if !strings.Contains(log, "GET /java-ok ") || strings.Contains(log, "GET /java-control ") {
				t.Errorf("the upstream's log should show the JVM's fetch and not its control's:\n%s", log)
			}
		})
	}
}

// A trust store that cannot be made (here a directory stands where it
// goes) stops the start with one line saying where and what to do, and
// leaves no sandbox behind.
func TestATrustStoreThatCannotBeMadeStopsTheStartInOneLine(t *testing.T) {
	e := newEnv(t)
	if r := e.run("run", "-q", "--allow-host", "example.com", "--", "true"); r.code != 0 {
		t.Fatalf("a first run with a network: %v", r)
	}
	stores, _ := filepath.Glob(filepath.Join(e.state, "*", "ca-truststore-*.p12"))
	if len(stores) == 0 {
		stores, _ = filepath.Glob(filepath.Join(e.state, "ca-truststore-*.p12"))
	}
	if len(stores) != 1 {
		t.Fatalf("want one trust store in the state dir, found %v", stores)
	}
	if err := os.Remove(stores[0]); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(stores[0], "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := e.run("run", "-q", "--allow-host", "example.com", "--", "echo", "ran")
	msg := strings.TrimSpace(r.stderr)
	t.Log(msg)
	if r.code != 125 || strings.Contains(r.stdout, "ran") || strings.Contains(msg, "\n") ||
		!strings.Contains(msg, "java trust store") || !strings.Contains(msg, stores[0]) || !strings.Contains(msg, "AIRLOCK_STATE_DIR") {
		t.Errorf("want exit 125 and one line naming %s and what to do: %v", stores[0], r)
	}
	if ents := e.sandboxDirs(); len(ents) != 0 {
		t.Errorf("the refused start left %v", ents)
	}
	// Without a network no trust store is needed: runs go on.
	if r := e.run("run", "-q", "--", "echo", "ran"); r.code != 0 || r.stdout != "ran\n" {
		t.Errorf("a run without a network: %v", r)
	}
}
