// Package proto is the framed protocol between airlock's host side and its guest
// agent: each frame is a 4-byte big-endian length followed by one CBOR-encoded Msg,
// and a frame may carry file descriptors (SCM_RIGHTS) on a Unix socket (not
// on a StreamConn, where the guest relays a TTY over Output/Stdin instead).
//
// Message sequence on a sandbox's control channel:
//
//	host                          guest (PID 1)
//	[Mounts +fds ...]   ───────▶  (root's sandboxes: idmapped mounts made on the host)
//	Init{...}           ───────▶  mounts, pivot_root, Landlock, seccomp, caps dropped
//	[Exec{ID:n} +fds]   ───────▶  (a run's command, sent behind the plan: read once locked down)
//	                    ◀───────  Ready | Error{Step}
//	Exec{ID:n} [+fds]   ───────▶  start process
//	                    ◀───────  Started{ID:n, PID} [+pty master fd]
//	Stdin/Resize/Signal ───────▶  (stream mode / tty)
//	                    ◀───────  Output{ID:n} ... Exit{ID:n}
//	WriteFile, ReadFile, ListFiles, Stat, Mkdir, Remove ──▶ Result | Error
//	Dial{Port}          ───────▶  connect to 127.0.0.1:Port inside
//	                    ◀───────  Result +socket fd | Error   (published ports, proxy door)
//
// Every request carries an ID chosen by the sender; replies and stream messages
// carry the same ID, so many requests can be in flight on one connection.
package proto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/fxamacker/cbor/v2"
)

// MaxFrame bounds one frame's body. Larger payloads (files) are refused by the
// sender; the receiver treats a larger length as a protocol violation.
const MaxFrame = 16 << 20

// MaxFDs bounds the descriptors one message may carry.
const MaxFDs = 8

// Op says what a message is.
type Op uint8

const (
	OpInvalid    Op = iota
	OpInit          // host→guest: Init
	OpReady         // guest→host: setup done
	OpError         // either way: Error, the request with this ID failed
	OpExec          // host→guest: Exec
	OpStarted       // guest→host: process started (PID), pty master attached when TTY
	OpStdin         // host→guest: Data for a stream-mode process's stdin
	OpStdinClose    // host→guest: close stdin
	OpOutput        // guest→host: Data from stdout (Stream 1) or stderr (Stream 2)
	OpExit          // guest→host: Exit
	OpSignal        // host→guest: deliver Signal to process ID (or the sandbox when ID names no process)
	OpResize        // host→guest: window size for a TTY process
	OpWriteFile     // host→guest: write Data to Path with Mode
	OpReadFile      // host→guest: read Path → Result.Data
	OpListFiles     // host→guest: list Path → Result.Files
	OpStat          // host→guest: stat Path → Result.Files[0]
	OpMkdir         // host→guest: mkdir -p Path with Mode
	OpRemove        // host→guest: remove Path (recursively when Recursive)
	OpResult        // guest→host: success of a file request
	OpKill          // client→supervisor: stop the sandbox
	// Approvals, on the control socket only (the guest never sees them):
	OpApprovals      // client→supervisor: list pending requests; the reply's Data is JSON
	OpDecide         // client→supervisor: answer request Path with the JSON decision in Data
	OpWatchApprovals // client→supervisor: stream approval events (Output frames, JSON in Data) until the client goes
	// OpMounts (host→guest, before Init) carries mounts the host made for a
	// sandbox of root's (idmapped clones), at most MaxFDs per message;
	// Init's Mount.FD numbers them in the order they came.
	OpMounts
	// OpAttach (client→supervisor, control socket only) connects the
	// client's terminal (Rows, Cols) to a detached sandbox's main command:
	// Started carries one end of a byte stream (the terminal's both ways);
	// Resize and Signal follow with the same ID; Exit when the command ends.
	OpAttach
	// OpDial (host→guest) connects to the sandbox's own 127.0.0.1:Port
	// from inside, for a published port without a network interface (the
	// proxy door); the Result carries the connected socket.
	OpDial
	opMax
)

var opNames = [...]string{"invalid", "init", "ready", "error", "exec", "started", "stdin", "stdin_close",
	"output", "exit", "signal", "resize", "write_file", "read_file", "list_files", "stat", "mkdir", "remove", "result", "kill",
	"approvals", "decide", "watch_approvals", "mounts", "attach", "dial"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Msg is the one envelope every frame holds. Fields unused by an Op stay empty.
type Msg struct {
	ID        uint32     `cbor:"1,keyasint,omitempty"`
	Op        Op         `cbor:"2,keyasint"`
	NFDs      uint8      `cbor:"3,keyasint,omitempty"` // descriptors attached to this frame
	Init      *Init      `cbor:"4,keyasint,omitempty"`
	Exec      *Exec      `cbor:"5,keyasint,omitempty"`
	Exit      *Exit      `cbor:"6,keyasint,omitempty"`
	Err       *Error     `cbor:"7,keyasint,omitempty"`
	Data      []byte     `cbor:"8,keyasint,omitempty"`
	Stream    uint8      `cbor:"9,keyasint,omitempty"`
	Path      string     `cbor:"10,keyasint,omitempty"`
	Mode      uint32     `cbor:"11,keyasint,omitempty"`
	Recursive bool       `cbor:"12,keyasint,omitempty"`
	Files     []FileInfo `cbor:"13,keyasint,omitempty"`
	Signal    int        `cbor:"14,keyasint,omitempty"`
	Rows      uint16     `cbor:"15,keyasint,omitempty"`
	Cols      uint16     `cbor:"16,keyasint,omitempty"`
	PID       int        `cbor:"17,keyasint,omitempty"`
	Warnings  []string   `cbor:"18,keyasint,omitempty"`
	Port      uint16     `cbor:"19,keyasint,omitempty"` // dial: the sandbox's port
}

// Stdio modes of an Exec.
const (
	StdioFDs    = "fds"    // three descriptors (stdin, stdout, stderr) ride on the Exec frame
	StdioStream = "stream" // Stdin/Output messages carry the bytes
)

// Exec starts one process in the sandbox.
type Exec struct {
	Argv      []string `cbor:"1,keyasint"`
	Env       []string `cbor:"2,keyasint,omitempty"`
	Dir       string   `cbor:"3,keyasint,omitempty"`
	TTY       bool     `cbor:"4,keyasint,omitempty"` // allocate a pty inside; its master returns on Started
	Rows      uint16   `cbor:"5,keyasint,omitempty"`
	Cols      uint16   `cbor:"6,keyasint,omitempty"`
	Stdio     string   `cbor:"7,keyasint,omitempty"`
	TimeoutMS int64    `cbor:"8,keyasint,omitempty"`
	// Last says the sandbox ends with this process (a run's main command):
	// a native guest exits as soon as it has reported the exit, rather than
	// wait for the host's kill. Other guests ignore it.
	Last bool `cbor:"9,keyasint,omitempty"`
}

// Exit reports how a process ended. Code follows the shell: 128+N for signal N,
// 126 not executable, 127 not found.
type Exit struct {
	Code       int    `cbor:"1,keyasint"`
	Signal     int    `cbor:"2,keyasint,omitempty"`
	DurationMS int64  `cbor:"3,keyasint,omitempty"`
	Reason     string `cbor:"4,keyasint,omitempty"` // why airlock ended it (timeout, not found)
}

// Error is a failure that crossed the boundary. Step names what failed
// ("pivot_root", "landlock", "exec") so the host can wrap it.
type Error struct {
	Step    string `cbor:"1,keyasint,omitempty"`
	Message string `cbor:"2,keyasint"`
	Errno   int    `cbor:"3,keyasint,omitempty"`
}

func (e *Error) Error() string {
	if e.Step == "" {
		return e.Message
	}
	return e.Step + ": " + e.Message
}

// FileInfo describes one file for list_files and stat.
type FileInfo struct {
	Name    string `cbor:"1,keyasint"`
	Size    int64  `cbor:"2,keyasint,omitempty"`
	Mode    uint32 `cbor:"3,keyasint"` // Go fs.FileMode bits
	ModTime int64  `cbor:"4,keyasint,omitempty"`
	Link    string `cbor:"5,keyasint,omitempty"`
}

var (
	encMode cbor.EncMode
	decMode cbor.DecMode
)

func init() {
	var err error
	if encMode, err = (cbor.EncOptions{}).EncMode(); err != nil {
		panic(err)
	}
	// Bounds against hostile frames: the frame length caps total size; these cap
	// nesting and element counts so decoding stays cheap.
	decMode, err = cbor.DecOptions{
		MaxNestedLevels:   16,
		MaxArrayElements:  1 << 16,
		MaxMapPairs:       1 << 10,
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
	}.DecMode()
	if err != nil {
		panic(err)
	}
}

// ErrFrameTooLarge is returned for a frame whose length exceeds the limit.
var ErrFrameTooLarge = errors.New("proto: frame too large")

// Encode returns m as one frame: length prefix and CBOR body.
func Encode(m *Msg) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write([]byte{0, 0, 0, 0})
	if err := encMode.NewEncoder(&buf).Encode(m); err != nil {
		return nil, fmt.Errorf("proto: encode %s: %w", m.Op, err)
	}
	b := buf.Bytes()
	n := len(b) - 4
	if n > MaxFrame {
		return nil, fmt.Errorf("%w: %s message of %d bytes (limit %d)", ErrFrameTooLarge, m.Op, n, MaxFrame)
	}
	binary.BigEndian.PutUint32(b, uint32(n))
	return b, nil
}

// Decode parses one frame body (without the length prefix).
func Decode(body []byte) (*Msg, error) {
	var m Msg
	if err := decMode.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("proto: decode: %w", err)
	}
	if m.Op == OpInvalid || m.Op >= opMax {
		return nil, fmt.Errorf("proto: decode: unknown op %d", m.Op)
	}
	if m.NFDs > MaxFDs {
		return nil, fmt.Errorf("proto: decode: %d descriptors (limit %d)", m.NFDs, MaxFDs)
	}
	return &m, nil
}

// ReadFrame reads one frame body from r, refusing bodies over max bytes before
// allocating them.
func ReadFrame(r io.Reader, max int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if int64(n) > int64(max) {
		return nil, fmt.Errorf("%w: %d bytes (limit %d)", ErrFrameTooLarge, n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return body, nil
}
