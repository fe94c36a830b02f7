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

func newDoctorCmd() *cobra.Command {
	var asJSON, fix bool
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Report which kernel features airlock can use here, and what degrades without each",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			r, fixed := doctor.RunFix(fix)
			// The vm backend's row: optional, so it never fails the doctor.
			ctx, cancel := context.WithTimeout(c.Context(), time.Minute)
			ok, detail, impact := engine.VMCheck(ctx)
			cancel()
			row := doctor.Check{Name: "vm backend (QEMU)", Status: doctor.StatusOK, Detail: detail, Impact: impact}
			if !ok {
				row.Status = doctor.StatusMissing
			} else if impact != "" {
				row.Status = doctor.StatusDegraded
			}
			r.Checks = append(r.Checks, row)
			// The kubernetes backend's row: optional too.
			ctx, cancel = context.WithTimeout(c.Context(), 20*time.Second)
			ok, detail, impact = engine.KubernetesCheck(ctx, doctorConfig())
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
				fmt.Fprintln(c.ErrOrStderr(), "airlock: fixed:", f)
			}
			if asJSON {
				enc := json.NewEncoder(c.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(r); err != nil {
					return err
				}
			} else {
				r.Write(c.OutOrStdout(), term.IsTerminal(int(os.Stdout.Fd())))
			}
			if !r.OK() {
				return exitError{1}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().BoolVar(&fix, "fix", false, "repair what can be repaired first (as root: reserve the id range for sandboxes in /etc/subuid and /etc/subgid)")
	return c
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
