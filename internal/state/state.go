// Package state keeps the on-disk registry of sandboxes: one directory per sandbox, a record, a status, and a lock held by its live supervisor.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Sentinel errors; callers test them with errors.Is.
var (
	ErrNotFound  = errors.New("sandbox not found")
	ErrAmbiguous = errors.New("ambiguous sandbox reference")
	ErrRunning   = errors.New("sandbox is running")
	ErrNameTaken = errors.New("sandbox name already in use")
)

// State is the lifecycle phase recorded in status.json.
type State string

const (
	Creating State = "creating"
	Running  State = "running"
	Exited   State = "exited"
	Crashed  State = "crashed"
)

// Record describes a sandbox; it is written once its supervisor knows the details.
type Record struct {
	ID        string          `json:"id"` // 12 lowercase hex chars, random
	Name      string          `json:"name,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	PID       int             `json:"pid"` // supervisor pid
	Backend   string          `json:"backend"`
	Workspace string          `json:"workspace"`
	Branch    string          `json:"branch,omitempty"` // --branch: the workspace is airlock's worktree of it
	Command   []string        `json:"command"`
	Detached  bool            `json:"detached"`
	Origin    string          `json:"origin,omitempty"`  // cli, rpc or api: what made it
	Cgroups   []string        `json:"cgroups,omitempty"` // dirs to clean after a crash
	Config    json.RawMessage `json:"config,omitempty"`
	// Ports are the published ports as bound (a host port the host picked
	// filled in): airlock port lists them.
	Ports []Port `json:"ports,omitempty"`
}

// Port is one published port: HostIP:HostPort on the host into the
// sandbox's SandboxPort (TCP).
type Port struct {
	HostIP      string `json:"host_ip"`
	HostPort    int    `json:"host_port"`
	SandboxPort int    `json:"sandbox_port"`
}

// Status is the mutable part of a sandbox, kept apart from the record so
// updating it never risks the record.
type Status struct {
	State      State      `json:"state"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Error      string     `json:"error,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// File names inside a sandbox directory.
const (
	recordFile   = "sandbox.json"
	statusFile   = "status.json"
	lockFile     = "lock"
	socketFile   = "ctl.sock"
	socketRedir  = "ctl.sock.path" // holds the socket path when ctl.sock would be too long
	logsFile     = "logs"
	sandboxesDir = "sandboxes"
	storeLock    = "sandboxes.lock"
	cleanedMark  = "sandboxes.cleaned" // its time: when cleanLeftovers last looked
	newPrefix    = ".new-"
	trashPrefix  = ".trash-"
	sparePrefix  = ".spare-"
)

// maxSocketPath is sizeof(sun_path) minus the terminating NUL.
const maxSocketPath = 107

// leftoverAge is how long a directory may look half-made before it is
// treated as the remains of a crash rather than a create in progress.
const leftoverAge = time.Minute

const namePattern = `^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`

// Plain loops, not regexps: compiling them at init cost every airlock
// process, the sandbox's PID 1 included, 0.3 ms.
func validID(id string) bool {
	if len(id) != 12 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidName reports whether name is acceptable as a sandbox name.
func ValidName(name string) bool {
	if len(name) == 0 || len(name) > 63 {
		return false
	}
	for i, c := range name {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// Root returns the state root: $AIRLOCK_STATE_DIR, else $XDG_STATE_HOME/airlock,
// else $HOME/.local/state/airlock. When neither XDG_STATE_HOME nor HOME gives a
// directory we can create and write (no HOME, or e.g. user nobody with
// HOME=/root), it falls back to /tmp/airlock-<uid>, created 0700, and refuses
// that directory if it is a symlink, not ours, or not mode 0700, because
// /tmp is shared and another user could have planted it.
func Root() (string, error) {
	return rootFrom(os.Getenv, "/tmp")
}

func rootFrom(getenv func(string) string, tmp string) (string, error) {
	if d := getenv("AIRLOCK_STATE_DIR"); d != "" {
		// An explicit choice is never silently replaced; Open reports problems.
		abs, err := filepath.Abs(d)
		if err != nil {
			return "", fmt.Errorf("state: resolve AIRLOCK_STATE_DIR: %w", err)
		}
		return abs, nil
	}
	// The XDG spec says relative values are invalid and must be ignored.
	if x := getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		if d := filepath.Join(x, "airlock"); usableDir(d) {
			return d, nil
		}
	}
	if h := getenv("HOME"); filepath.IsAbs(h) {
		if d := filepath.Join(h, ".local", "state", "airlock"); usableDir(d) {
			return d, nil
		}
	}
	d := filepath.Join(tmp, fmt.Sprintf("airlock-%d", os.Geteuid()))
	if err := secureDir(d); err != nil {
		return "", fmt.Errorf("state: no usable state dir in XDG_STATE_HOME or HOME, and fallback refused: %w", err)
	}
	return d, nil
}

// usableDir creates d if needed and checks we can write in it; an existing
// but foreign directory (HOME=/root for nobody) must not be chosen.
func usableDir(d string) bool {
	if err := os.MkdirAll(d, 0o700); err != nil {
		return false
	}
	return syscall.Access(d, 0x2|0x1) == nil // W_OK|X_OK
}

// secureDir makes d a private directory, or explains why the existing one
// cannot be trusted. Lstat (not Stat) so a planted symlink is refused.
func secureDir(d string) error {
	if err := os.Mkdir(d, 0o700); err == nil {
		// Mkdir is subject to umask; make the mode exact so the check below holds.
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("chmod %s: %w", d, err)
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", d, err)
	}
	fi, err := os.Lstat(d)
	if err != nil {
		return fmt.Errorf("stat %s: %w", d, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symlink; refusing to use it", d)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory; refusing to use it", d)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: cannot read owner", d)
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("%s is owned by uid %d, not %d; refusing to use it", d, st.Uid, uid)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		return fmt.Errorf("%s has mode %#o, want 0700; refusing to use it", d, perm)
	}
	return nil
}

// Store is a state root opened for use.
type Store struct {
	root string
	// tmp is where the short socket fallback lives; a field so tests can
	// exercise it without touching the real /tmp.
	tmp string
}

// Open prepares root/sandboxes (0700) and returns a Store for it.
func Open(root string) (*Store, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("state: open %s: %w", root, err)
	}
	if err := os.MkdirAll(filepath.Join(abs, sandboxesDir), 0o700); err != nil {
		return nil, fmt.Errorf("state: open: %w", err)
	}
	return &Store{root: abs, tmp: "/tmp"}, nil
}

// Root returns the store's absolute root directory.
func (s *Store) Root() string { return s.root }

func (s *Store) sandboxes() string { return filepath.Join(s.root, sandboxesDir) }

// Entry is one sandbox as seen by List; Status reflects crash detection,
// not just what status.json says.
type Entry struct {
	Record Record
	Status Status
	Dir    string
}

// SocketPath returns where the sandbox's control socket lives.
func (e Entry) SocketPath() string { return socketPathOf(e.Dir) }

// LogPath returns the output log of a detached sandbox.
func (e Entry) LogPath() string { return filepath.Join(e.Dir, logsFile) }

// socketPathOf honours a recorded fallback path; the redirect is only
// trusted if it names this sandbox's socket, so a tampered file cannot point
// clients somewhere arbitrary.
func socketPathOf(dir string) string {
	def := filepath.Join(dir, socketFile)
	b, err := os.ReadFile(filepath.Join(dir, socketRedir))
	if err != nil {
		return def
	}
	p := string(b)
	if filepath.IsAbs(p) && filepath.Clean(p) == p && filepath.Base(p) == filepath.Base(dir)+".sock" {
		return p
	}
	return def
}
