package hostexec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/childspec"
)

// killGrace is how long a command's sandbox has to end after SIGTERM
// (airlock run passes it to the command) before its whole process group
// is killed; waitDelay bounds how long output is still read after that.
const (
	killGrace     = 2 * time.Second
	waitDelay     = time.Second
	removeTimeout = 10 * time.Second
)

func lookPath(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%s: relative PATH entry", p)
	}
	return p, nil
}

func refuse(w http.ResponseWriter, status int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(Refusal{Error: msg, Reason: reason})
}

// parse reads and bounds a request.
func parse(w http.ResponseWriter, r *http.Request) (Request, error) {
	var req Request
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		return req, fmt.Errorf("request body: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("request body: %w", err)
	}
	switch {
	case len(req.Argv) == 0 || req.Argv[0] == "":
		return req, errors.New("argv[0] is empty")
	case len(req.Argv) > MaxArgs:
		return req, fmt.Errorf("%d arguments, more than %d", len(req.Argv), MaxArgs)
	case strings.IndexByte(req.Dir, 0) >= 0:
		return req, errors.New("dir holds a NUL byte")
	}
	for i, a := range req.Argv {
		if len(a) > MaxArg {
			return req, fmt.Errorf("argv[%d] is %d bytes, more than %d", i, len(a), MaxArg)
		}
		if strings.IndexByte(a, 0) >= 0 {
			return req, fmt.Errorf("argv[%d] holds a NUL byte", i)
		}
	}
	return req, nil
}

func capped(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// run serves POST Path: check, decide, run, stream.
func (h *handler) run(w http.ResponseWriter, r *http.Request) {
	req, err := parse(w, r)
	if err != nil {
		h.audit(audit.Record{Op: "request", Decision: audit.Deny, Reason: err.Error()})
		refuse(w, http.StatusBadRequest, RefusedBadRequest, err.Error())
		return
	}
	cmd := Canonical(req.Argv)
	rec := audit.Record{Subject: capped(cmd, maxSubject), Argv: req.Argv}
	dir, err := h.workdir(req.Dir)
	if err != nil {
		rec.Op, rec.Decision, rec.Reason = "request", audit.Deny, err.Error()
		h.audit(rec)
		refuse(w, http.StatusBadRequest, RefusedBadRequest, err.Error())
		return
	}
	rec.Op, rec.Path = "request", dir
	h.audit(rec)
	rec.Argv = nil // the request record has it

	decided := func(d, rule, reason, by string) {
		rec.Op, rec.Decision, rec.Rule, rec.Reason = "decide", d, rule, reason
		rec.Extra = map[string]string{"by": by}
		h.audit(rec)
	}
	if msg := h.workspaceRefusal(); msg != "" {
		decided(audit.Deny, "", msg, "auto")
		refuse(w, http.StatusConflict, RefusedWorkspace, msg)
		return
	}
	d := h.pol.Decide(cmd)
	if d.Verdict == Deny {
		decided(audit.Deny, d.Rule, d.Reason, "auto")
		refuse(w, http.StatusForbidden, RefusedDenied, "denied by policy: "+d.Reason+": "+capped(cmd, 200))
		return
	}
	bin, err := binary(req.Argv[0], dir)
	if err != nil {
		decided(audit.Deny, d.Rule, err.Error(), "auto")
		refuse(w, http.StatusNotFound, RefusedNotFound, err.Error())
		return
	}
	if d.Verdict == Allow {
		decided(audit.Allow, d.Rule, d.Reason, "auto")
	} else {
		hd, remembered := h.ask(r.Context(), cmd, reach(h.root, dir, bin, d.Grant), d)
		if err := r.Context().Err(); err != nil {
			decided(audit.Deny, d.Rule, "canceled while waiting for a decision", "client")
			return
		}
		by := "human:" + hd.By
		if remembered {
			by = "remembered:" + hd.By
		}
		if !hd.Allow {
			decided(audit.Deny, d.Rule, "not approved ("+hd.By+")", by)
			refuse(w, http.StatusForbidden, RefusedDenied, fmt.Sprintf("denied by %s: %s", hd.By, capped(cmd, 200)))
			return
		}
		decided(audit.Allow, d.Rule, "approved ("+hd.By+")", by)
	}
	select {
	case h.running <- struct{}{}:
		defer func() { <-h.running }()
	default:
		msg := fmt.Sprintf("%d host commands of this sandbox are running already (the limit): try again when one ends", cap(h.running))
		rec.Op, rec.Decision, rec.Reason, rec.Extra = "end", audit.Deny, msg, nil
		h.audit(rec)
		refuse(w, http.StatusTooManyRequests, RefusedBusy, msg)
		return
	}
	name := fmt.Sprintf("hostexec-%s-%d", nameSafe(h.env.Sandbox), h.seq.Add(1))
	networked := d.Grant != nil && len(d.Grant.AllowHosts)+len(d.Grant.Secrets) > 0
	h.exec(w, r.Context(), rec, name, networked, ChildSpec(name, h.root, dir, h.cfg.Timeout, d.Grant, req.Argv))
}

// ask gets a human's decision on cmd, or the one remembered for this
// sandbox from an earlier answer whose scope was wider than once. The
// human sees the whole command and what it will reach (detail); what
// cannot be shown whole is denied without asking.
func (h *handler) ask(ctx context.Context, cmd, detail string, d Decision) (approval.Decision, bool) {
	h.mu.Lock()
	prev, ok := h.remembered[cmd+"\x00"+detail]
	h.mu.Unlock()
	if ok {
		return prev, true
	}
	if h.env.Ask == nil {
		return approval.Decision{By: "nobody"}, false
	}
	if len(cmd)+len(detail) > MaxShown {
		return approval.Decision{By: fmt.Sprintf("nobody: the request is %d bytes, more than the %d an approval shows whole", len(cmd)+len(detail), MaxShown)}, false
	}
	hd := h.env.Ask(ctx, approval.Request{
		Sandbox: h.env.Sandbox,
		Kind:    approval.KindHostExec,
		Subject: cmd,
		Detail:  detail,
		Reason:  d.Reason,
	})
	if hd.Scope != "" && hd.Scope != approval.Once && ctx.Err() == nil {
		h.mu.Lock()
		h.remembered[cmd+"\x00"+detail] = hd
		h.mu.Unlock()
	}
	return hd, false
}

// exec runs the command in its own sandbox (airlock run with spec) and
// streams its output as frames.
func (h *handler) exec(w http.ResponseWriter, parent context.Context, rec audit.Record, name string, networked bool, spec childspec.Spec) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(parent, h.cfg.Timeout)
	defer cancel()

	c, err := childspec.Command(ctx, h.env.Exe, spec)
	if err != nil {
		rec.Op, rec.Decision, rec.Reason, rec.Extra = "end", audit.Error, err.Error(), nil
		h.audit(rec)
		refuse(w, http.StatusInternalServerError, RefusedFailed, err.Error())
		return
	}
	defer childspec.Close(c)
	// The child airlock keeps this process's environment (a secret's env
	// source reads it); the command inside gets none of it.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var (
		endMu sync.Mutex
		ended bool // reaped: its group id may be another's
	)
	killGroup := func(sig syscall.Signal) {
		endMu.Lock()
		defer endMu.Unlock()
		if !ended {
			syscall.Kill(-c.Process.Pid, sig)
		}
	}
	// SIGTERM first: airlock run hands it to the command and takes its
	// sandbox down cleanly; then the whole group, sandbox and all.
	c.Cancel = func() error {
		killGroup(syscall.SIGTERM)
		time.AfterFunc(killGrace, func() { killGroup(syscall.SIGKILL) })
		return nil
	}
	c.WaitDelay = killGrace + waitDelay

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	s := &stream{enc: json.NewEncoder(w), rc: http.NewResponseController(w), max: h.cfg.MaxOutput, kill: cancel}
	c.Stdout = &streamWriter{s, "stdout"}
	c.Stderr = &streamWriter{s, "stderr"}

	if err := c.Start(); err != nil {
		msg := fmt.Sprintf("start the command's sandbox (%s): %v", h.env.Exe, errors.Unwrap(err))
		rec.Op, rec.Decision, rec.Reason, rec.Extra = "end", audit.Error, msg, nil
		h.audit(rec)
		refuse(w, http.StatusInternalServerError, RefusedFailed, msg)
		return
	}
	// Headers now: a client sees the command has started even when it is
	// silent. Under the lock: its output may be arriving already.
	s.mu.Lock()
	if !s.started {
		s.started = true
		w.WriteHeader(http.StatusOK)
		s.rc.Flush()
	}
	s.mu.Unlock()
	werr := c.Wait()
	killGroup(syscall.SIGKILL) // what it left behind in its group
	endMu.Lock()
	ended = true
	endMu.Unlock()

	code, reason, msg := exitOf(c.ProcessState, werr)
	s.mu.Lock()
	over, out := s.over, s.n
	s.mu.Unlock()
	switch {
	case over:
		reason, msg = EndOutputLimit, fmt.Sprintf("output passed %d bytes: killed, output cut there", h.cfg.MaxOutput)
	case errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil:
		reason, msg = EndTimeout, fmt.Sprintf("timed out after %v: killed", h.cfg.Timeout)
	case parent.Err() != nil:
		reason, msg = EndCanceled, "the client went away: killed"
	}
	took := time.Since(start)
	rec.Op, rec.Decision, rec.Rule, rec.Extra = "end", "", "", nil
	rec.ExitCode, rec.Reason, rec.Duration, rec.BytesIn = &code, reason, audit.Millis(took), out
	if msg != "" {
		rec.Extra = map[string]string{"message": msg}
	}
	h.audit(rec)
	s.frame(Frame{Exit: &code, Reason: reason, Message: msg})
	if networked {
		h.adopt(name)
	}
	h.remove(name)
}

// nameSafe keeps what a sandbox name may hold of id (letters, digits, _ . -),
// at most 40 bytes of it.
func nameSafe(id string) string {
	b := []byte(id)[:min(len(id), 40)]
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// Bounds on what adopt copies of one command's audit log.
const (
	maxAdoptedBytes   = 4 << 20
	maxAdoptedRecords = 2000
)

// adopt copies what the command's sandbox recorded of its network (each
// request and refusal: what a hook did with the rule's grants) into this
// sandbox's audit log, tagged with the command's sandbox, before that
// sandbox's record (and its log) is removed.
func (h *handler) adopt(name string) {
	if h.env.Audit == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, h.env.Exe, "audit", "--json", name)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := c.StdoutPipe()
	if err != nil || c.Start() != nil {
		return
	}
	defer c.Wait()
	defer cancel() // what is not read stops its writer
	dec := json.NewDecoder(io.LimitReader(out, maxAdoptedBytes))
	for n := 0; n < maxAdoptedRecords; n++ {
		var r audit.Record
		if dec.Decode(&r) != nil {
			return
		}
		switch r.Kind {
		case audit.KindNetwork, audit.KindDNS, audit.KindHTTP, audit.KindLLM:
		default:
			continue // its start, stop and command: this log's hostexec records say those
		}
		r.Sandbox = h.env.Sandbox
		extra := map[string]string{"hostexec": name}
		for k, v := range r.Extra {
			extra[k] = v
		}
		r.Extra = extra
		h.env.Audit(r)
	}
}

// remove deletes the record of the command's sandbox, named so that one
// killed mid-run leaves nothing behind either. The client has its last
// frame already.
func (h *handler) remove(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, h.env.Exe, "rm", "-f", name)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Run()
}

// exitOf turns how the process ended into an exit code (128+n for a signal
// n), a reason, and a message for anything unusual.
func exitOf(ps *os.ProcessState, werr error) (int, string, string) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), EndSignaled, "killed by signal " + ws.Signal().String()
	}
	msg := ""
	if errors.Is(werr, exec.ErrWaitDelay) {
		msg = "its output stayed open after it ended (a background process?): closed and killed"
	}
	return ps.ExitCode(), EndExited, msg
}

// stream writes frames to the response, one flushed per write, until the
// output cap: then it kills the command and drops the rest.
type stream struct {
	mu      sync.Mutex
	enc     *json.Encoder
	rc      *http.ResponseController
	n       int64 // output bytes sent
	max     int64
	over    bool  // the cap was reached
	started bool  // the 200 header is written
	err     error // the client is gone
	kill    func()
}

func (s *stream) frame(f Frame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.write(f)
}

func (s *stream) write(f Frame) {
	if s.err != nil {
		return
	}
	s.started = true // the first frame writes the 200 header
	if s.err = s.enc.Encode(f); s.err == nil {
		s.err = s.rc.Flush()
	}
	if s.err != nil {
		s.kill()
	}
}

type streamWriter struct {
	s    *stream
	name string
}

// Write always takes all of p, so the command's pipe drains until it dies.
func (w *streamWriter) Write(p []byte) (int, error) {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	if s.over || s.err != nil {
		return n, nil
	}
	if room := s.max - s.n; int64(len(p)) > room {
		p, s.over = p[:room], true
	}
	if len(p) > 0 {
		s.n += int64(len(p))
		s.write(Frame{Stream: w.name, Data: p})
	}
	if s.over {
		s.kill()
	}
	return n, nil
}
