package devcontainer

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

const jsonc = `// The project's environment.
{
	/* a block comment */
	"name": "app",
	"build": {
		"dockerfile": "Dockerfile",
		"context": "..",
		"args": {"V": "1",},
		"target": "dev",
	},
	"containerEnv": {"A": "a", "B": "${containerEnv:A}-b"},
	"remoteEnv": {"W": "${containerWorkspaceFolder}", "LEAK": "${localEnv:HOME}"},
	"forwardPorts": [3000, "db:5432"],
	"postCreateCommand": "echo hi > made",
	"onCreateCommand": ["touch", "a b"],
	"postStartCommand": {"one": "true", "two": ["true"]},
	"privileged": true,
	"capAdd": ["SYS_ADMIN"],
	"runArgs": ["--privileged"],
	"mounts": ["source=/,target=/host,type=bind"],
	"initializeCommand": "touch /tmp/pwned",
	"features": {"ghcr.io/devcontainers/features/docker-in-docker:2": {}},
	"frobnicate": 1,
}
`

func TestParseReadsJSONCAndSaysWhatItRefuses(t *testing.T) {
	c, err := Parse("/ws/.devcontainer/devcontainer.json", []byte(jsonc))
	if err != nil {
		t.Fatal(err)
	}
	if c.Build == nil || c.Build.Dockerfile != "/ws/.devcontainer/Dockerfile" || c.Build.Context != "/ws" || c.Build.Target != "dev" || c.Build.Args["V"] != "1" {
		t.Errorf("build = %+v", c.Build)
	}
	if !slices.Equal(c.ForwardPorts, []string{"3000", "db:5432"}) {
		t.Errorf("forwardPorts = %v", c.ForwardPorts)
	}
	if c.PostCreate.Shell != "echo hi > made" || !slices.Equal(c.OnCreate.Args, []string{"touch", "a b"}) || len(c.PostStart.Steps) != 2 {
		t.Errorf("lifecycle = %+v %+v %+v", c.OnCreate, c.PostCreate, c.PostStart)
	}
	notes := strings.Join(c.Notes, "\n")
	for _, want := range []string{"privileged refused", "capAdd refused", "runArgs refused", "mounts refused", "initializeCommand refused: it runs on the host", "features refused", `unknown property "frobnicate" ignored`} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, "name") {
		t.Errorf("name is not worth a note:\n%s", notes)
	}
}

func TestParseRefusesWhatItCannotUse(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"no image or build":          {`{"name": "x"}`, "neither image nor build"},
		"not an object":              {`[1]`, "not a JSON object"},
		"broken JSONC":               {`{"image": }`, "devcontainer.json"},
		"a port out of range":        {`{"image": "i", "forwardPorts": [70000]}`, "not a port"},
		"nested named steps":         {`{"image": "i", "postCreateCommand": {"a": {"b": "c"}}}`, "want a string"},
		"an env name with =":         {`{"image": "i", "containerEnv": {"A=B": "c"}}`, "not a variable name"},
		"a build without dockerfile": {`{"build": {"context": "."}}`, "dockerfile is not set"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("/ws/devcontainer.json", []byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestEnvSubstitutesButNeverTheHostsEnvironment(t *testing.T) {
	c, err := Parse("/ws/devcontainer.json", []byte(jsonc))
	if err != nil {
		t.Fatal(err)
	}
	env, notes := c.Env("/ws")
	want := []string{"A=a", "B=a-b", "LEAK=", "W=/ws"}
	if !slices.Equal(env, want) {
		t.Errorf("env = %v, want %v", env, want)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "${localEnv:HOME} left empty") {
		t.Errorf("notes = %v", notes)
	}
}

// TestWrapRunsEachFormThroughARealShell runs the wrapper with /bin/sh, as
// the sandbox does, and checks order, quoting and failure.
func TestWrapRunsEachFormThroughARealShell(t *testing.T) {
	dir := t.TempDir()
	c := &Config{
		OnCreate:   Command{Args: []string{"sh", "-c", `printf '%s\n' "$0" >> log`, "on 'q' $x"}},
		PostCreate: Command{Shell: "echo post >> log"},
		PostStart:  Command{Steps: map[string]Command{"a": {Shell: "echo a > a"}, "b": {Args: []string{"touch", "b"}}}},
	}
	argv := c.Wrap([]string{"sh", "-c", "echo main >> log"})
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "log"))
	if string(log) != "on 'q' $x\npost\nmain\n" {
		t.Errorf("log = %q", log)
	}
	for _, f := range []string{"a", "b"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("step %s did not run: %v", f, err)
		}
	}
	c = &Config{PostCreate: Command{Shell: "exit 7"}}
	argv = c.Wrap([]string{"touch", "main"})
	cmd = exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 || !strings.Contains(string(out), "postCreateCommand failed (exit 7)") {
		t.Errorf("err = %v, out = %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "main")); err == nil {
		t.Error("the command ran after a failed lifecycle command")
	}
	if got := (&Config{}).Wrap([]string{"x"}); !slices.Equal(got, []string{"x"}) {
		t.Errorf("no lifecycle commands: %v", got)
	}
}

func TestContextStoresLinksAsLinksAndLeavesHiddenFilesOut(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM x\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n"), 0o644)
	os.WriteFile(filepath.Join(dir, ".env"), []byte("SECRET=1\n"), 0o600)
	os.Symlink("/etc/passwd", filepath.Join(dir, "passwd"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	hide := func(rel string, isDir bool) bool { return rel == ".env" || rel == "Dockerfile" }
	if err := WriteContext(&buf, dir, hide, "Dockerfile"); err != nil {
		t.Fatal(err)
	}
	got := map[string]*tar.Header{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
	}
	if h := got["passwd"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/etc/passwd" || h.Size != 0 {
		t.Errorf("the link was not stored as a link: %+v", h)
	}
	if got[".env"] != nil {
		t.Error("a hidden file went into the context")
	}
	if got["fifo"] != nil {
		t.Error("a FIFO went into the context")
	}
	if got["Dockerfile"] == nil || got["main.go"] == nil || got["sub/"] == nil {
		t.Errorf("context = %v", got)
	}
}

func TestContextIsBounded(t *testing.T) {
	dir := t.TempDir()
	for i := range 3 {
		os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), make([]byte, 1000), 0o644)
	}
	defer func(b int64, f int) { MaxContextBytes, MaxContextFiles = b, f }(MaxContextBytes, MaxContextFiles)
	MaxContextBytes = 2500
	if err := WriteContext(io.Discard, dir, nil, "Dockerfile"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("bytes: %v", err)
	}
	MaxContextBytes, MaxContextFiles = 1<<20, 2
	if err := WriteContext(io.Discard, dir, nil, "Dockerfile"); err == nil || !strings.Contains(err.Error(), "more than 2 files") {
		t.Errorf("files: %v", err)
	}
	MaxContextFiles = 3
	if err := WriteContext(io.Discard, dir, nil, "Dockerfile"); err != nil {
		t.Errorf("within the bounds: %v", err)
	}
}

func TestReadBuildNamesTheStepThatFailed(t *testing.T) {
	stream := `{"stream":"Step 1/2 : FROM base\n"}
{"stream":" ---\u003e abc\n"}
{"stream":"Step 2/2 : RUN false\n"}
{"errorDetail":{"code":1,"message":"The command '/bin/sh -c false' returned a non-zero code: 1"},"error":"The command '/bin/sh -c false' returned a non-zero code: 1"}
`
	var progress bytes.Buffer
	err := readBuild(strings.NewReader(stream), &progress)
	if err == nil || err.Error() != "Step 2/2 : RUN false failed: The command '/bin/sh -c false' returned a non-zero code: 1" {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(progress.String(), "  Step 1/2 : FROM base\n") {
		t.Errorf("progress = %q", progress.String())
	}
}

func TestLoadTrustCoversTheDockerfile(t *testing.T) {
	ws := t.TempDir()
	cdir := t.TempDir()
	os.Mkdir(filepath.Join(ws, ".devcontainer"), 0o755)
	file := filepath.Join(ws, ".devcontainer", "devcontainer.json")
	os.WriteFile(file, []byte(`{"build": {"dockerfile": "Dockerfile"}}`), 0o644)
	os.WriteFile(filepath.Join(ws, ".devcontainer", "Dockerfile"), []byte("FROM a\n"), 0o644)
	l, err := Load(ws, file)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CheckTrust(cdir); err == nil || !strings.Contains(err.Error(), "is not trusted") {
		t.Fatalf("untrusted: %v", err)
	}
	if err := l.Trust(cdir); err != nil {
		t.Fatal(err)
	}
	if l, _ = Load(ws, file); l.CheckTrust(cdir) != nil {
		t.Fatal("trusted file refused")
	}
	os.WriteFile(filepath.Join(ws, ".devcontainer", "Dockerfile"), []byte("FROM a\nRUN evil\n"), 0o644)
	if l, _ = Load(ws, file); l.CheckTrust(cdir) == nil || !strings.Contains(l.CheckTrust(cdir).Error(), "changed since you trusted it") {
		t.Fatal("a changed Dockerfile kept its trust")
	}
	os.WriteFile(file, []byte(`{"build": {"dockerfile": "../../etc/Dockerfile"}}`), 0o644)
	if _, err := Load(ws, file); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("a Dockerfile outside the workspace: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(jsonc))
	f.Add([]byte(`{"image":"x","postCreateCommand":{"a":["b"]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse("/ws/devcontainer.json", b)
		if err != nil {
			return
		}
		if c.Image == "" && c.Build == nil {
			t.Fatal("a config with nothing to run was accepted")
		}
		for _, p := range c.ForwardPorts {
			if p == "" {
				t.Fatal("empty port")
			}
		}
		c.Wrap([]string{"x"})
		c.Env("/ws")
	})
}

func TestLoadRefusesALinkOutOfTheWorkspace(t *testing.T) {
	ws, out := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(out, "devcontainer.json"), []byte(`{"image": "x"}`), 0o644)
	os.Symlink(out, filepath.Join(ws, ".devcontainer"))
	if _, err := Load(ws, filepath.Join(ws, ".devcontainer", "devcontainer.json")); err == nil || !strings.Contains(err.Error(), "link out of it") {
		t.Fatalf("a .devcontainer linked out of the workspace: %v", err)
	}
	os.Remove(filepath.Join(ws, ".devcontainer"))
	os.Symlink(filepath.Join(out, "devcontainer.json"), filepath.Join(ws, ".devcontainer.json"))
	if _, err := Load(ws, filepath.Join(ws, ".devcontainer.json")); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("a devcontainer.json that is a link: %v", err)
	}
}

func TestWorkdirStaysInTheWorkspace(t *testing.T) {
	for name, tc := range map[string]struct{ folder, want, note string }{
		"unset":                {"", "", ""},
		"the workspace itself": {"${containerWorkspaceFolder}", "/ws", ""},
		"a directory in it":    {"/ws/sub", "/ws/sub", ""},
		"the spec's default":   {"/workspaces/app", "", "ignored"},
		"out by dot-dot":       {"/ws/../etc", "", "ignored"},
	} {
		t.Run(name, func(t *testing.T) {
			c := &Config{File: "f", WorkspaceFolder: tc.folder}
			got, note := c.Workdir("/ws")
			if got != tc.want || !strings.Contains(note, tc.note) || (tc.note == "") != (note == "") {
				t.Errorf("Workdir(%q) = %q, %q", tc.folder, got, note)
			}
		})
	}
}

func TestLoadRefusesAFileOutsideTheWorkspace(t *testing.T) {
	ws, out := t.TempDir(), t.TempDir()
	file := filepath.Join(out, "devcontainer.json")
	os.WriteFile(file, []byte(`{"image": "x"}`), 0o644)
	if _, err := Load(ws, file); err == nil || !strings.Contains(err.Error(), "outside the workspace") {
		t.Fatalf("a file outside: %v", err)
	}
	os.WriteFile(filepath.Join(ws, "devcontainer.json"), []byte(`{"build": {"dockerfile": "Dockerfile", "context": "../.."}}`), 0o644)
	if _, err := Load(ws, filepath.Join(ws, "devcontainer.json")); err == nil || !strings.Contains(err.Error(), "build.context") {
		t.Fatalf("a context outside: %v", err)
	}
}
