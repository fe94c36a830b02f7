package vm

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Prune kills the QEMU recorded in the run dir of every sandbox under
// stateRoot that running says is gone, and names what it killed. A QEMU
// dies with its supervisor (Pdeathsig); this catches what escaped that.
func Prune(stateRoot string, running func(id string) bool) ([]string, error) {
	pids, _ := filepath.Glob(filepath.Join(stateRoot, "sandboxes", "*", "*", PIDFile))
	var killed []string
	for _, p := range pids {
		id := filepath.Base(filepath.Dir(filepath.Dir(p)))
		if running(id) {
			continue
		}
		if pid, ok := qemuPID(p); ok {
			syscall.Kill(pid, syscall.SIGKILL)
			killed = append(killed, "qemu "+strconv.Itoa(pid)+" of "+id)
		}
		os.Remove(p)
	}
	return killed, nil
}

// qemuPID reads a pid file and checks that the pid is still a QEMU of
// ours (its command line names the machine airlock-vm), not a reused pid.
func qemuPID(pidFile string) (int, bool) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, false
	}
	cmd, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return 0, false
	}
	args := bytes.Split(cmd, []byte{0})
	return pid, len(args) > 2 && strings.HasPrefix(filepath.Base(string(args[0])), "qemu-system") && bytes.Contains(cmd, []byte("\x00-name\x00airlock-vm\x00"))
}
