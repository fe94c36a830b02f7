package seccomp

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Enforcement tests re-execute the test binary: the child runs one scenario,
// optionally after Install, since a filter can never be removed again.
const (
	childEnv   = "AIRLOCK_SECCOMP_TEST_CHILD"   // scenario name
	installEnv = "AIRLOCK_SECCOMP_TEST_INSTALL" // "1": call Install first
)

// scenarios are the child programs, keyed by name; probes add theirs in init.
var scenarios = map[string]func() error{}

func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		os.Exit(runScenario(name))
	}
	os.Exit(m.Run())
}

func runScenario(name string) int {
	fn, ok := scenarios[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown scenario %q\n", name)
		return 2
	}
	if os.Getenv(installEnv) == "1" {
		if err := Install(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
	}
	if err := fn(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// runChild runs scenario name in a fresh copy of the test binary and returns
// its stdout, or an error carrying its exit status and stderr.
func runChild(t *testing.T, name string, install bool) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		childEnv+"="+name,
		installEnv+"="+map[bool]string{true: "1"}[install],
		// The race detector otherwise lingers 1s at exit in every child.
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w; stderr:\n%s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
