package hostexec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
)

// URL is where a sandbox reaches the service, through either door.
const URL = "http://airlock.internal" + Path

// Result is how a command run through Run ended: its last frame.
type Result struct {
	Exit    int
	Reason  string // one of the End reasons
	Message string // set for anything but a plain exit
}

// RefusedError is a refusal: nothing was run.
type RefusedError struct {
	Status int
	Refusal
}

func (e *RefusedError) Error() string { return e.Refusal.Error }

// ErrCut is returned when the stream ends before the command's exit frame.
var ErrCut = errors.New("the connection ended before the command did")

// Run asks the service at url to run req and copies the command's output to
// stdout and stderr as it arrives. Nothing was run when the error is a
// *RefusedError. Canceling ctx kills the command on the host.
func Run(ctx context.Context, c *http.Client, url string, req Request, stdout, stderr io.Writer) (Result, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Result{}, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Result{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(hr)
	if err != nil {
		return Result{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var r Refusal
		b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
		if json.Unmarshal(b, &r) != nil || r.Error == "" {
			r = Refusal{Error: fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(b)), Reason: RefusedFailed}
		}
		return Result{}, &RefusedError{Status: resp.StatusCode, Refusal: r}
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var f Frame
		if err := dec.Decode(&f); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = ErrCut
			}
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return Result{}, err
		}
		switch {
		case f.Exit != nil:
			return Result{Exit: *f.Exit, Reason: f.Reason, Message: f.Message}, nil
		case f.Stream == "stdout":
			_, err = stdout.Write(f.Data)
		case f.Stream == "stderr":
			_, err = stderr.Write(f.Data)
		}
		if err != nil {
			return Result{}, err
		}
	}
}

// WorkspaceDir is the slash-separated dir to send for a client whose working
// directory is cwd when the workspace is mounted at workspace: "" (the
// workspace itself) when cwd is not inside it.
func WorkspaceDir(workspace, cwd string) string {
	if workspace == "" || cwd == "" {
		return ""
	}
	rel, err := filepath.Rel(filepath.Clean(workspace), filepath.Clean(cwd))
	if err != nil || !filepath.IsLocal(rel) || rel == "." {
		return ""
	}
	return filepath.ToSlash(rel)
}
