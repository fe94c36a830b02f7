package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/supervisor"
	"github.com/airlock-dev/airlock/internal/term"
)

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// supervise is the background supervisor of `airlock run -d`: fd 3 holds the
// sandbox's lock, fd 4 is the pipe on which the parent waits for "ok".
func supervise(args []string) int {
	ready := os.NewFile(4, "ready")
	report := func(err error) {
		if err != nil {
			fmt.Fprintf(ready, "error: %v\n", err)
		} else {
			fmt.Fprintln(ready, "ok")
		}
		ready.Close()
	}
	if len(args) != 1 {
		report(fmt.Errorf("usage: airlock %s DIR", superviseCmd))
		return supervisor.ExitAirlock
	}
	h, err := state.Adopt(args[0], 3)
	if err != nil {
		report(err)
		return supervisor.ExitAirlock
	}
	var spec engine.Spec
	rec, err := h.ReadRecord()
	if err == nil {
		err = json.Unmarshal(rec.Config, &spec)
	}
	if err != nil {
		h.Remove()
		report(fmt.Errorf("read sandbox spec: %w", err))
		return supervisor.ExitAirlock
	}
	devnull, _ := os.Open(os.DevNull)
	code, err := supervisor.Run(h, spec, term.IO{Stdin: devnull, Stdout: os.Stdout, Stderr: os.Stderr}, supervisor.Options{Ready: report})
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock: %v\n", err)
	}
	return code
}
