package main

import (
	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/guest"
)

// subcommands are airlock's commands, in the order help lists them.
var subcommands = []subcommand{
	{"run", newRunCmd}, {"exec", newExecCmd}, {"attach", newAttachCmd}, {"ls", func() *cobra.Command { return newLsCmd(nil) }}, {"get", func() *cobra.Command { return newGetCmd(nil) }}, {"logs", func() *cobra.Command { return newLogsCmd(nil) }},
	{"port", func() *cobra.Command { return newPortCmd(nil) }},
	{"kill", func() *cobra.Command { return newKillCmd(nil) }}, {"rm", newRmCmd}, {"undo", func() *cobra.Command { return newUndoCmd(nil) }}, {"prune", newPruneCmd}, {"diff", func() *cobra.Command { return newDiffCmd(nil) }}, {"apply", newApplyCmd},
	{"discard", func() *cobra.Command { return newDiscardCmd(nil) }}, {"audit", newAuditCmd}, {"ca", newCACmd}, {"doctor", newDoctorCmd},
	{"gateway", newGatewayCmd}, {"images", newImagesCmd}, {"rpc", newRPCCmd}, {"config", newConfigCmd},
	{"trust", newTrustCmd}, {"policy", newPolicyCmd}, {"approvals", newApprovalsCmd}, {"agent", newAgentCmd},
	{"approve", func() *cobra.Command { return newDecideCmd(true) }},
	{"deny", func() *cobra.Command { return newDecideCmd(false) }},
	{"revoke", newRevokeCmd}, {"ui", newUICmd}, {"mcp-bridge", newMCPBridgeCmd}, {"hostexec", newHostexecCmd},
	{"version", newVersionCmd},
}

// vmInit boots a VM's guest when the kernel runs this binary as its /init
// (the vm backend copies in this binary); it then never returns.
func vmInit() {
	if guest.IsVMInit() {
		guest.VMInit()
	}
}
