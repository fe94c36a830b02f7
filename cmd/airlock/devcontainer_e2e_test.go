//go:build linux

package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/airlock-dev/airlock/internal/dockerengine"
)

// devcontainerBase is a local image with a shell, made from the host's own
// dash, cat and libc (no registry is reachable): what a Dockerfile builds
// FROM in these tests.
func devcontainerBase(t *testing.T) (*client.Client, string) {
	t.Helper()
	cli, err := dockerengine.Connect(context.Background())
	if err != nil {
		t.Skipf("needs a Docker engine this user may use: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin", "lib", "lib64", "lib/x86_64-linux-gnu", "etc", "tmp", "run", "proc", "sys", "dev", "root"} {
		tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, Typeflag: tar.TypeDir})
	}
	add := func(src, dst string) {
		real, err := filepath.EvalSymlinks(src)
		if err != nil {
			t.Skipf("the host has no %s to make a base image from", src)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		tw.WriteHeader(&tar.Header{Name: dst, Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg})
		tw.Write(b)
	}
	add("/bin/dash", "bin/sh")
	add("/bin/cat", "bin/cat")
	add("/bin/touch", "bin/touch")
	add("/lib/x86_64-linux-gnu/libc.so.6", "lib/x86_64-linux-gnu/libc.so.6")
	add("/lib64/ld-linux-x86-64.so.2", "lib64/ld-linux-x86-64.so.2")
	passwd := []byte("root:x:0:0:root:/root:/bin/sh\n")
	tw.WriteHeader(&tar.Header{Name: "etc/passwd", Mode: 0o644, Size: int64(len(passwd)), Typeflag: tar.TypeReg})
	tw.Write(passwd)
	tw.Close()
	tag := fmt.Sprintf("airlock-test/devcontainer-base:%d", os.Getpid())
	rc, err := cli.ImageImport(context.Background(), image.ImportSource{Source: &buf, SourceName: "-"}, tag, image.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	readImport(rc)
	t.Cleanup(func() { cli.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true}) })
	return cli, tag
}

// removeBuilt removes the images built for ws's devcontainer.json.
func removeBuilt(t *testing.T, cli *client.Client, ws string) {
	t.Cleanup(func() {
		f := filters.NewArgs(filters.Arg("label", "airlock.devcontainer="+filepath.Join(ws, ".devcontainer", "devcontainer.json")))
		imgs, _ := cli.ImageList(context.Background(), image.ListOptions{Filters: f})
		for _, im := range imgs {
			cli.ImageRemove(context.Background(), im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
		}
	})
}

// writeDevcontainer writes ws's .devcontainer/devcontainer.json and Dockerfile.
func writeDevcontainer(t *testing.T, ws, json, dockerfile string) {
	t.Helper()
	d := filepath.Join(ws, ".devcontainer")
	os.MkdirAll(d, 0o755)
	if err := os.WriteFile(filepath.Join(d, "devcontainer.json"), []byte(json), 0o644); err != nil {
		t.Fatal(err)
	}
	if dockerfile != "" {
		if err := os.WriteFile(filepath.Join(d, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// dcRun is airlock run --devcontainer on the docker backend, whatever
// backend the suite runs.
func dcRun(e *env, args ...string) result {
	e.t.Helper()
	if testBackend() == "vm" {
		e.t.Skip("a devcontainer runs on the docker backend")
	}
	return e.run(append([]string{"run", "--devcontainer"}, args...)...)
}

func TestDevcontainerBuildsAndRunsInsideOnceTrusted(t *testing.T) {
	cli, base := devcontainerBase(t)
	e := newEnv(t)
	removeBuilt(t, cli, e.ws)
	canary := filepath.Join(t.TempDir(), "host-canary")
	tmpCanary := fmt.Sprintf("/tmp/airlock-dc-canary-%d", os.Getpid())
	os.Remove(tmpCanary)
	writeDevcontainer(t, e.ws, `// JSONC: comments and trailing commas, as the spec allows
{
	"name": "app",
	"build": {"dockerfile": "Dockerfile", "context": "..", "args": {"GREETING": "hello",},},
	"containerEnv": {"FROM_FILE": "yes", "BOTH": "${containerEnv:FROM_FILE}-too"},
	"remoteEnv": {"WS": "${containerWorkspaceFolder}"},
	/* lifecycle commands run inside the sandbox */
	"onCreateCommand": ["sh", "-c", "echo on-create > on.txt"],
	"postCreateCommand": "cat /built > post.txt; touch `+tmpCanary+` 2>/dev/null || true",
	"postStartCommand": {"a": "echo started > start.txt"},
	"initializeCommand": "touch `+canary+`",
	"forwardPorts": [3000],
	"privileged": true,
	"capAdd": ["SYS_ADMIN"],
	"securityOpt": ["seccomp=unconfined"],
	"runArgs": ["--privileged"],
	"mounts": ["source=/,target=/host,type=bind"],
	"init": true,
	"features": {"ghcr.io/devcontainers/features/docker-in-docker:2": {}},
	"appPort": [8080],
	"frobnicate": 1,
}
`, "FROM "+base+"\nARG GREETING\nENV FROM_IMAGE=baked HOME=/image-home PATH=/opt/tool/bin:/usr/bin:/bin\nRUN echo \"$GREETING built\" > /built\nCOPY . /ctx\n")
	os.WriteFile(filepath.Join(e.ws, ".env"), []byte("SECRET=hunter2\n"), 0o600)
	os.WriteFile(filepath.Join(e.ws, "main.go"), []byte("package main\n"), 0o644)

	// Untrusted: refused in one line, nothing built or run.
	r := dcRun(e, "--", "sh", "-c", "echo ran")
	if r.code != 125 || !strings.Contains(r.stderr, "is not trusted") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || strings.Contains(r.stdout, "ran") {
		t.Fatalf("untrusted devcontainer.json: %v", r)
	}
	if r := e.run("trust", "--devcontainer"); r.code != 0 || !strings.Contains(r.stdout, "trusted ") || !strings.Contains(r.stdout, "RUN echo") {
		t.Fatalf("airlock trust --devcontainer: %v", r)
	}

	r = dcRun(e, "--", "sh", "-c", `echo "env=$FROM_FILE $BOTH ws=$WS image=$FROM_IMAGE path=$PATH home=$HOME"; cat /ctx/main.go; cat /ctx/.env 2>/dev/null || echo no-dotenv; touch /rootfs-write 2>/dev/null || echo read-only-root`)
	if r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	for _, want := range []string{"env=yes yes-too ws=" + e.ws, "package main", "no-dotenv", "read-only-root"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q: %q", want, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "image=baked path=/opt/tool/bin:") || strings.Contains(r.stdout, "home=/image-home") {
		t.Errorf("the image's ENV (but HOME) should reach the command: %q", r.stdout)
	}
	if strings.Contains(r.stdout, "hunter2") {
		t.Error("a hidden file (.env) was baked into the image")
	}
	// Progress, and one line for each property refused or ignored.
	for _, want := range []string{"Step 1/", "Successfully tagged airlock-devcontainer/",
		"privileged refused", "capAdd refused", "securityOpt refused", "runArgs refused", "mounts refused", "init refused",
		"features refused", "appPort refused", "initializeCommand refused: it runs on the host", `unknown property "frobnicate"`,
		"forwardPorts 3000 not published: the sandbox has no network"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	// The lifecycle commands ran inside: what they wrote in the workspace
	// came from the built image, and what they wrote in /tmp is not the host's.
	for f, want := range map[string]string{"on.txt": "on-create\n", "post.txt": "hello built\n", "start.txt": "started\n"} {
		if b, err := os.ReadFile(filepath.Join(e.ws, f)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", f, b, err, want)
		}
	}
	if _, err := os.Stat(tmpCanary); err == nil {
		os.Remove(tmpCanary)
		t.Error("postCreateCommand wrote the host's /tmp: it ran on the host")
	}
	if _, err := os.Stat(canary); err == nil {
		t.Error("initializeCommand ran on the host")
	}
}

func TestDevcontainerChangedFileNeedsTrustAgain(t *testing.T) {
	cli, base := devcontainerBase(t)
	e := newEnv(t)
	removeBuilt(t, cli, e.ws)
	writeDevcontainer(t, e.ws, `{"image": "`+base+`", "postCreateCommand": "echo post > post.txt"}`, "")
	if r := e.run("trust", "--devcontainer"); r.code != 0 {
		t.Fatalf("trust: %v", r)
	}
	if r := dcRun(e, "--", "cat", "post.txt"); r.code != 0 || r.stdout != "post\n" {
		t.Fatalf("trusted image form: %v", r)
	}
	writeDevcontainer(t, e.ws, `{"image": "`+base+`", "postCreateCommand": "echo changed > post.txt"}`, "")
	r := dcRun(e, "--", "cat", "post.txt")
	if r.code != 125 || !strings.Contains(r.stderr, "changed since you trusted it") || !strings.Contains(r.stderr, "airlock trust --devcontainer") {
		t.Fatalf("changed file: %v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(e.ws, "post.txt")); string(b) != "post\n" {
		t.Errorf("the changed file's command ran: post.txt = %q", b)
	}
	// The Dockerfile is part of what is trusted.
	writeDevcontainer(t, e.ws, `{"build": {"dockerfile": "Dockerfile"}}`, "FROM "+base+"\n")
	if r := e.run("trust", "--devcontainer"); r.code != 0 {
		t.Fatalf("trust: %v", r)
	}
	writeDevcontainer(t, e.ws, `{"build": {"dockerfile": "Dockerfile"}}`, "FROM "+base+"\nRUN touch /x\n")
	if r := dcRun(e, "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "changed since you trusted it") || strings.Contains(r.stderr, "Step 1/") {
		t.Fatalf("changed Dockerfile: %v", r)
	}
}

func TestDevcontainerFailedBuildNamesItsStep(t *testing.T) {
	cli, base := devcontainerBase(t)
	e := newEnv(t)
	removeBuilt(t, cli, e.ws)
	writeDevcontainer(t, e.ws, `{"build": {"dockerfile": "Dockerfile"}, "postCreateCommand": "touch ran"}`,
		"FROM "+base+"\nRUN echo first\nRUN exit 3\n")
	if r := e.run("trust", "--devcontainer"); r.code != 0 {
		t.Fatalf("trust: %v", r)
	}
	r := dcRun(e, "--", "touch", "main-ran")
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	last := lines[len(lines)-1]
	if r.code != 125 || !strings.Contains(last, "Step 3/") || !strings.Contains(last, "RUN exit 3 failed") || !strings.Contains(last, "non-zero code: 3") {
		t.Fatalf("failed build: code %d, last line %q", r.code, last)
	}
	for _, f := range []string{"ran", "main-ran"} {
		if _, err := os.Stat(filepath.Join(e.ws, f)); err == nil {
			t.Errorf("%s exists: something ran after a failed build", f)
		}
	}
}
