package main

import (
	"encoding/json"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/airlock-dev/airlock/internal/doctor"
)

func newDoctorCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Report which kernel features airlock can use here, and what degrades without each",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			r := doctor.Run()
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
	return c
}
