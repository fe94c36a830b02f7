package supervisor

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/airlock-dev/airlock/internal/control"
	"github.com/airlock-dev/airlock/internal/proto"
)

func TestConsoleKeepsABoundedReplayFromALineStart(t *testing.T) {
	c := newConsole()
	c.output([]byte("first line\n"))
	if got := string(c.replay()); got != "first line\n" {
		t.Fatalf("replay = %q", got)
	}
	for i := 0; i < 100; i++ {
		c.output(bytes.Repeat([]byte("x"), 1000))
		c.output([]byte("\x1b[31mred\n"))
	}
	if len(c.ring) > replayBytes {
		t.Fatalf("the ring holds %d bytes, more than %d", len(c.ring), replayBytes)
	}
	r := c.replay()
	if !bytes.HasPrefix(r, []byte("x")) || bytes.Contains(r, []byte("first line")) {
		t.Fatalf("replay starts %q: want a line's start, the oldest output gone", r[:20])
	}
	c.output(bytes.Repeat([]byte("y"), 3*replayBytes))
	if len(c.ring) != replayBytes {
		t.Fatalf("one big write left %d bytes", len(c.ring))
	}
}

// TestConsoleAttachesOneClientAndCutsOffOneThatStopsReading drives a real
// pty: the client sees the replay and new output, a second is refused, and
// a client that reads nothing is cut off once its queue is full while the
// command's output keeps being read.
func TestConsoleAttachesOneClientAndCutsOffOneThatStopsReading(t *testing.T) {
	ptm, pts, err := pty.Open()
	if err != nil {
		t.Skip("no pty:", err)
	}
	defer pts.Close()
	c := newConsole()
	c.start(ptm, nil)
	pts.Write([]byte("before\n"))
	time.Sleep(50 * time.Millisecond)
	f, a, err := c.Attach(30, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Attach(30, 100); !errors.Is(err, control.ErrAttached) {
		t.Fatalf("second Attach = %v, want ErrAttached", err)
	}
	if ws, _ := pty.GetsizeFull(pts); ws.Rows != 30 || ws.Cols != 100 {
		t.Fatalf("the command's size is %dx%d, want the client's 30x100", ws.Rows, ws.Cols)
	}
	got := make([]byte, 64)
	f.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _ := io.ReadAtLeast(f, got, len("before"))
	if !strings.Contains(string(got[:n]), "before") {
		t.Fatalf("the client read %q, want the replay", got[:n])
	}
	// Stop reading; the command floods: the client is cut off, the
	// command never blocks.
	done := make(chan struct{})
	go func() {
		chunk := bytes.Repeat([]byte("z"), 4096)
		for i := 0; i < (attachQueue*readChunk)/4096*4; i++ {
			pts.Write(chunk)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the command blocked on a client that stopped reading")
	}
	if e, err := a.Wait(); e != nil || err == nil || !strings.Contains(err.Error(), "fell too far behind") {
		t.Fatalf("Wait = %v, %v; want cut off", e, err)
	}
	f.Close()
	// The next client attaches; the command's exit reaches it.
	f2, a2, err := c.Attach(30, 100)
	if err != nil {
		t.Fatalf("attach after a cut-off client: %v", err)
	}
	defer f2.Close()
	go io.Copy(io.Discard, f2)
	pts.Close()
	c.end(&proto.Exit{Code: 3}, true)
	if e, err := a2.Wait(); err != nil || e.Code != 3 {
		t.Fatalf("Wait = %v, %v; want the exit", e, err)
	}
	if _, _, err := c.Attach(1, 1); !errors.Is(err, control.ErrNoTerminal) {
		t.Fatalf("Attach after the exit = %v", err)
	}
}
