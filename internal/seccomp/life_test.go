package seccomp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// lifeChecks are ordinary things PID 1 and its children do after Install;
// each must keep working under the filter.
var lifeChecks = []struct {
	name string
	fn   func() error
}{
	{"all threads filtered", checkAllThreadsFiltered},
	{"new threads", checkNewThreads},
	{"exec", checkExec},
	{"exec setsid", checkExecSetsid},
	{"process kill and wait", checkKillWait},
	{"pipe", checkPipe},
	{"getpid", checkGetpid},
	{"read file", checkReadFile},
	{"unshare(0)", func() error { return unix.Unshare(0) }},
	{"unix socket SCM_RIGHTS", checkSCMRights},
	{"signals", checkSignals},
	{"pty with controlling tty", checkPty},
	{"children inherit the filter", checkInherited},
	{"landlock allowed", checkLandlock},
	{"install again (stacking)", Install},
}

func init() {
	for _, c := range lifeChecks {
		scenarios["life:"+c.name] = c.fn
	}
}

func TestLifeAfterInstall(t *testing.T) {
	for _, c := range lifeChecks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if _, err := runChild(t, "life:"+c.name, true); err != nil {
				t.Errorf("exit %d: %v", exitCode(err), err)
			}
		})
	}
}

// statusField returns a field of a /proc/.../status file.
func statusField(path, field string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("%s: no %s field", path, field)
}

// checkFiltered verifies that the task behind status runs in seccomp filter
// mode (2) with no_new_privs set.
func checkFiltered(status string) error {
	for field, want := range map[string]string{"Seccomp": "2", "NoNewPrivs": "1"} {
		got, err := statusField(status, field)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s: %s is %s, want %s", status, field, got, want)
		}
	}
	return nil
}

// checkAllThreadsFiltered verifies TSYNC: threads that existed before Install
// carry the filter too.
func checkAllThreadsFiltered() error {
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		return err
	}
	if len(tasks) < 2 {
		return fmt.Errorf("only %d threads; expected the Go runtime to have several", len(tasks))
	}
	for _, status := range tasks {
		if err := checkFiltered(status); err != nil {
			return err
		}
	}
	return nil
}

// checkNewThreads forces the runtime to create OS threads after Install.
func checkNewThreads() error {
	const n = 32
	var started, done sync.WaitGroup
	errs := make(chan error, n)
	started.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			started.Done()
			started.Wait() // all n goroutines hold a thread at once
			errs <- checkFiltered("/proc/thread-self/status")
		}()
	}
	done.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}

func checkExec() error {
	out, err := exec.Command("/bin/sh", "-c", "echo ok").Output()
	if err != nil {
		return err
	}
	if string(out) != "ok\n" {
		return fmt.Errorf("output %q", out)
	}
	return nil
}

func checkExecSetsid() error {
	// Field 6 of /proc/PID/stat is the session ID; "(sh)" has no spaces.
	cmd := exec.Command("/bin/sh", "-c", `read pid comm state ppid pgrp sid rest </proc/$$/stat; [ "$pid" = "$sid" ]`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("child is not a session leader: %v %s", err, out)
	}
	return nil
}

func checkKillWait() error {
	cmd := exec.Command("/bin/sleep", "60")
	if err := cmd.Start(); err != nil {
		return err
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	err := cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		return fmt.Errorf("wait: %v (status %v)", err, ws)
	}
	return nil
}

func checkPipe() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	if _, err := w.Write([]byte("hi")); err != nil {
		return err
	}
	w.Close()
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "hi" {
		return fmt.Errorf("read %q, %v", b, err)
	}
	return nil
}

func checkGetpid() error {
	if pid := unix.Getpid(); pid != os.Getpid() || pid <= 0 {
		return fmt.Errorf("getpid %d, os.Getpid %d", pid, os.Getpid())
	}
	return nil
}

func checkReadFile() error {
	b, err := os.ReadFile("/etc/passwd")
	if err == nil && len(b) == 0 {
		err = errors.New("/etc/passwd is empty")
	}
	return err
}

// checkSCMRights passes a pipe's write end over a unix socket pair.
func checkSCMRights() error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	if err := unix.Sendmsg(fds[0], []byte{0}, unix.UnixRights(int(w.Fd())), nil, 0); err != nil {
		return fmt.Errorf("sendmsg: %w", err)
	}
	w.Close()
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(fds[1], make([]byte, 1), oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return fmt.Errorf("recvmsg: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return fmt.Errorf("control messages %v, %v", msgs, err)
	}
	got, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(got) != 1 {
		return fmt.Errorf("rights %v, %v", got, err)
	}
	passed := os.NewFile(uintptr(got[0]), "passed")
	if _, err := passed.Write([]byte("via fd")); err != nil {
		return err
	}
	passed.Close()
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "via fd" {
		return fmt.Errorf("read %q, %v", b, err)
	}
	return nil
}

func checkSignals() error {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	defer signal.Stop(ch)
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("SIGUSR1 not delivered")
	}
}

// checkPty does what creack/pty and a terminal-attached shell do: allocate a
// pty, size it, and start a child with it as controlling terminal.
func checkPty() error {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	defer ptmx.Close()
	fd := int(ptmx.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		return fmt.Errorf("TIOCSPTLCK: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		return fmt.Errorf("TIOCGPTN: %w", err)
	}
	tty, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 33, Col: 77}); err != nil {
		return fmt.Errorf("TIOCSWINSZ: %w", err)
	}
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil || ws.Row != 33 || ws.Col != 77 {
		return fmt.Errorf("TIOCGWINSZ: %+v, %v", ws, err)
	}

	// Setctty makes the child issue TIOCSCTTY; "tty" fails without a terminal.
	cmd := exec.Command("/bin/sh", "-c", "stty size; tty >/dev/null && echo ctty-ok")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		tty.Close()
		return fmt.Errorf("start on pty: %w", err)
	}
	tty.Close()
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() {
		io.Copy(&out, ptmx) // ends with EIO once the child closes the replica
		close(copied)
	}()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("child on pty: %w", err)
	}
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
		return errors.New("pty output never ended")
	}
	if got := out.String(); !strings.Contains(got, "33 77") || !strings.Contains(got, "ctty-ok") {
		return fmt.Errorf("pty output %q", got)
	}
	return nil
}

// checkInherited verifies the filter in a grandchild started after Install.
func checkInherited() error {
	out, err := exec.Command("/bin/sh", "-c", "unshare -U true").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Operation not permitted") {
		return fmt.Errorf("unshare -U in a child: %v %q, want EPERM", err, out)
	}
	out, err = exec.Command("/bin/sh", "-c", "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status").Output()
	if err != nil {
		return err
	}
	if s := strings.Join(strings.Fields(string(out)), " "); s != "NoNewPrivs: 1 Seccomp: 2" {
		return fmt.Errorf("child status %q", s)
	}
	return nil
}

// checkLandlock verifies landlock is not refused: nesting it is harmless.
func checkLandlock() error {
	const versionFlag = 1 // LANDLOCK_CREATE_RULESET_VERSION
	_, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, versionFlag)
	if e == unix.EPERM {
		return errors.New("landlock_create_ruleset: EPERM")
	}
	return nil
}
