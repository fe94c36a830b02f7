package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/config"
)

// A place the sandbox writes in place may not hold airlock's config dir or
// state root, whether they exist yet or not, whatever the path's spelling.
func TestOwnDirsAreOutOfTheSandboxsReach(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	os.MkdirAll(filepath.Join(home, "proj"), 0o755)
	os.Symlink(home, filepath.Join(root, "link-to-home"))
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("AIRLOCK_CONFIG_DIR", "")
	state := filepath.Join(root, "var", "state")
	spec := func(ws string) *backend.Spec { return &backend.Spec{Workspace: ws, StateRoot: state} }

	refused := map[string]struct {
		b    *backend.Spec
		mode string
	}{
		"a bind workspace holding the config dir (not made yet)": {spec(home), config.WorkspaceBind},
		"the same through a symlink":                             {spec(filepath.Join(root, "link-to-home")), config.WorkspaceBind},
		"a bind workspace holding the state root":                {spec(filepath.Join(root, "var")), config.WorkspaceBind},
		"--rw of the config dir's parent":                        {&backend.Spec{Workspace: filepath.Join(home, "proj"), RW: []string{filepath.Join(home, ".config")}, StateRoot: state}, config.WorkspaceOverlay},
		"--home holding the config dir":                          {&backend.Spec{Workspace: filepath.Join(home, "proj"), Home: home, StateRoot: state}, config.WorkspaceOverlay},
	}
	for name, c := range refused {
		if err := ownDirsOutOfReach(c.b, c.mode); err == nil || !strings.Contains(err.Error(), "airlock's own") {
			t.Errorf("%s: want a refusal, got %v", name, err)
		}
	}
	if err := ownDirsOutOfReach(spec(home), config.WorkspaceBind); !strings.Contains(err.Error(), "--workspace-mode overlay") {
		t.Errorf("the workspace's refusal should say what to do instead: %v", err)
	}

	allowed := map[string]struct {
		b    *backend.Spec
		mode string
	}{
		"a project dir in bind mode":               {spec(filepath.Join(home, "proj")), config.WorkspaceBind},
		"the home as an overlay workspace":         {spec(home), config.WorkspaceOverlay},
		"the home as a copy workspace":             {spec(home), config.WorkspaceCopy},
		"--rw of a dir beside the config dir":      {&backend.Spec{Workspace: filepath.Join(home, "proj"), RW: []string{filepath.Join(home, ".cache")}, StateRoot: state}, config.WorkspaceBind},
		"a workspace whose name only starts alike": {spec(home + "-other"), config.WorkspaceBind},
	}
	for name, c := range allowed {
		if err := ownDirsOutOfReach(c.b, c.mode); err != nil {
			t.Errorf("%s: want it allowed, got %v", name, err)
		}
	}

	// $AIRLOCK_CONFIG_DIR counts wherever it points.
	t.Setenv("AIRLOCK_CONFIG_DIR", filepath.Join(home, "proj", ".airlock"))
	if err := ownDirsOutOfReach(spec(filepath.Join(home, "proj")), config.WorkspaceBind); err == nil {
		t.Errorf("a bind workspace holding $AIRLOCK_CONFIG_DIR was allowed")
	}
}
