package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/doctor"
	"github.com/airlock-dev/airlock/internal/engine"
)

// doctorOptions is what airlock doctor needs.
type doctorOptions struct {
	IO   *ioStreams
	JSON bool
	Fix  bool // repair what can be repaired first
	// TTY says whether Out is a terminal (the report's colours).
	TTY bool
}

func newDoctorCmd(runF func(*doctorOptions) error) *cobra.Command {
	o := &doctorOptions{IO: systemIO()}
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Report which kernel features airlock can use here, and what degrades without each",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.IO.Out, o.IO.ErrOut = c.OutOrStdout(), c.ErrOrStderr()
			o.TTY = term.IsTerminal(int(os.Stdout.Fd()))
			if runF != nil {
				return runF(o)
			}
			return doctorRun(c.Context(), o)
		},
	}
	c.Flags().BoolVar(&o.JSON, "json", false, "print JSON")
	c.Flags().BoolVar(&o.Fix, "fix", false, "repair what can be repaired first (as root: reserve the id range for sandboxes in /etc/subuid and /etc/subgid)")
	return c
}

func doctorRun(ctx context.Context, o *doctorOptions) error {
	r, fixed := doctor.RunFix(o.Fix)
	// The vm backend's row: optional, so it never fails the doctor.
	vctx, cancel := context.WithTimeout(ctx, time.Minute)
	ok, detail, impact := engine.VMCheck(vctx)
	cancel()
	row := doctor.Check{Name: "vm backend (QEMU)", Status: doctor.StatusOK, Detail: detail, Impact: impact}
	if !ok {
		row.Status = doctor.StatusMissing
	} else if impact != "" {
		row.Status = doctor.StatusDegraded
	}
	r.Checks = append(r.Checks, row)
	// The kubernetes backend's row: optional too.
	kctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	ok, detail, impact = engine.KubernetesCheck(kctx, doctorConfig())
	cancel()
	row = doctor.Check{Name: "kubernetes backend", Status: doctor.StatusOK, Detail: detail, Impact: impact}
	if !ok {
		row.Status = doctor.StatusMissing
	} else if impact != "" {
		row.Status = doctor.StatusDegraded
	}
	r.Checks = append(r.Checks, row)
	// The native guest's row: without the lean build it works, slower.
	lean, detail, impact := engine.GuestCheck()
	row = doctor.Check{Name: "native guest", Status: doctor.StatusOK, Detail: detail, Impact: impact}
	if !lean {
		row.Status = doctor.StatusDegraded
	}
	r.Checks = append(r.Checks, row)
	for _, f := range fixed {
		fmt.Fprintln(o.IO.ErrOut, "airlock: fixed:", f)
	}
	if o.JSON {
		enc := json.NewEncoder(o.IO.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		r.Write(o.IO.Out, o.TTY)
	}
	if !r.OK() {
		return exitError{1}
	}
	return nil
}

// doctorConfig is the config of the current directory's project, quietly:
// the kubernetes row names the cluster a run here would use.
func doctorConfig() *config.Spec {
	l, err := loadConfig("", nil, true, false)
	if err != nil {
		return &config.Spec{}
	}
	return &l.Spec
}
