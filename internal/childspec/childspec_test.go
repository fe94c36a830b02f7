package childspec

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/secrets"
)

func sample(t *testing.T) Spec {
	t.Helper()
	sec, err := secrets.ParseSpec("TOKEN=file:/run/tok@api.github.com:body")
	if err != nil {
		t.Fatal(err)
	}
	s := New("git", "push", "--", "-e")
	s.Name, s.Workdir, s.Hide = "hostexec-sb-1", "/ws/sub", []string{"/p/.env"}
	s.Config.Workspace = config.Workspace{Path: "/ws", Mode: config.WorkspaceBind, ProtectGit: true}
	s.Config.Limits.Timeout = 70 * time.Second
	s.Config.Network.AllowHosts = []string{"github.com"}
	s.Config.Network.Secrets = []secrets.Spec{sec}
	s.Config.Env = []string{"A=1"}
	return s
}

func TestASpecComesBackAsItWasSent(t *testing.T) {
	want := sample(t)
	cmd, err := Command(context.Background(), "/bin/airlock", want)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(cmd)
	if got := cmd.Args; !reflect.DeepEqual(got, []string{"/bin/airlock", "run", "--spec-fd", "3"}) {
		t.Errorf("Args = %q", got)
	}
	if len(cmd.ExtraFiles) != 1 {
		t.Fatalf("ExtraFiles = %d, want the spec at descriptor 3", len(cmd.ExtraFiles))
	}
	got, err := Read(cmd.ExtraFiles[0])
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Read = %+v\nwant %+v", got, want)
	}
}

// A secret travels as where its value comes from, never the value.
func TestASecretsValueNeverTravels(t *testing.T) {
	t.Setenv("CHILDSPEC_TOKEN", "s3cret-value")
	sec, err := secrets.ParseSpec("CHILDSPEC_TOKEN@api.github.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sec.Open(secrets.DefaultSources()); err != nil {
		t.Fatalf("the control: the secret opens: %v", err)
	}
	s := New("true")
	s.Config.Network.Secrets = []secrets.Spec{sec}
	cmd, err := Command(context.Background(), "airlock", s)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(cmd)
	b, _ := io.ReadAll(cmd.ExtraFiles[0])
	if bytes.Contains(b, []byte("s3cret-value")) {
		t.Errorf("the spec holds the secret's value: %s", b)
	}
	if !bytes.Contains(b, []byte(`"CHILDSPEC_TOKEN@api.github.com"`)) {
		t.Errorf("the spec lacks the secret's spec: %s", b)
	}
}

// The spec file has no path, and on Linux it is sealed: its holder can
// neither write nor truncate it.
func TestTheSpecFileHasNoNameAndCannotChange(t *testing.T) {
	cmd, err := Command(context.Background(), "airlock", New("true"))
	if err != nil {
		t.Fatal(err)
	}
	defer Close(cmd)
	f := cmd.ExtraFiles[0]
	if _, err := os.Stat(f.Name()); !os.IsNotExist(err) {
		t.Errorf("spec file %s: stat err %v, want no such path", f.Name(), err)
	}
	if runtime.GOOS != "linux" {
		return
	}
	if _, err := f.WriteAt([]byte("{}"), 0); err == nil {
		t.Error("the spec was rewritten")
	}
	if err := f.Truncate(0); err == nil {
		t.Error("the spec was truncated")
	}
	if s, err := Read(f); err != nil || len(s.Command) != 1 {
		t.Errorf("the control: the spec reads back: %+v, %v", s, err)
	}
}

func TestBadSpecsAreRefused(t *testing.T) {
	good, _ := json.Marshal(sample(t))
	tests := map[string]struct {
		in   string
		want string
	}{
		"an unknown field":         {`{"config":{},"command":["x"],"argv":["y"]}`, `unknown field "argv"`},
		"an unknown config field":  {`{"config":{"netwrk":{}},"command":["x"]}`, `unknown field "netwrk"`},
		"no command":               {`{"config":{}}`, "no command"},
		"two specs":                {string(good) + string(good), "more than one spec"},
		"a secret without a host":  {`{"config":{"network":{"secrets":["NO_HOST"]}},"command":["x"]}`, "missing"},
		"more than MaxSize":        {`{"config":{},"command":["` + strings.Repeat("a", MaxSize) + `"]}`, "more than"},
		"not JSON":                 {"run -q -- true", "decode"},
		"a secret given by value?": {`{"config":{"network":{"secrets":[{"Name":"X","Value":"v"}]}},"command":["x"]}`, "decode"},
	}
	for name, tt := range tests {
		_, err := Read(strings.NewReader(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Read err = %v, want %q", name, err, tt.want)
		}
	}
	if _, err := Read(bytes.NewReader(good)); err != nil {
		t.Errorf("the control: a good spec: %v", err)
	}
}

func FuzzRead(f *testing.F) {
	good, _ := json.Marshal(New("true"))
	f.Add(good)
	f.Add([]byte(`{"config":{"network":{"secrets":["A@b.com"]}},"command":["x"]}`))
	f.Fuzz(func(t *testing.T, b []byte) { Read(bytes.NewReader(b)) })
}
