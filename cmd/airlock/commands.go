package main

import (
	"github.com/spf13/cobra"
)

// subcommands are airlock's commands, in the order help lists them.
var subcommands = []subcommand{
	{"run", newRunCmd}, {"exec", func() *cobra.Command { return newExecCmd(nil) }}, {"attach", newAttachCmd}, {"ls", func() *cobra.Command { return newLsCmd(nil) }}, {"get", func() *cobra.Command { return newGetCmd(nil) }}, {"logs", func() *cobra.Command { return newLogsCmd(nil) }},
	{"port", func() *cobra.Command { return newPortCmd(nil) }},
	{"kill", func() *cobra.Command { return newKillCmd(nil) }}, {"rm", func() *cobra.Command { return newRmCmd(nil) }}, {"undo", func() *cobra.Command { return newUndoCmd(nil) }}, {"prune", func() *cobra.Command { return newPruneCmd(nil) }}, {"diff", func() *cobra.Command { return newDiffCmd(nil) }}, {"apply", func() *cobra.Command { return newApplyCmd(nil) }},
	{"discard", func() *cobra.Command { return newDiscardCmd(nil) }}, {"audit", func() *cobra.Command { return newAuditCmd(nil) }}, {"ca", newCACmd}, {"doctor", func() *cobra.Command { return newDoctorCmd(nil) }},
	{"gateway", func() *cobra.Command { return newGatewayCmd(nil) }}, {"images", newImagesCmd}, {"rpc", func() *cobra.Command { return newRPCCmd(nil) }}, {"config", newConfigCmd},
	{"trust", func() *cobra.Command { return newTrustCmd(nil) }}, {"policy", newPolicyCmd}, {"approvals", func() *cobra.Command { return newApprovalsCmd(nil) }}, {"agent", newAgentCmd},
	{"approve", func() *cobra.Command { return newDecideCmd(true, nil) }},
	{"deny", func() *cobra.Command { return newDecideCmd(false, nil) }},
	{"revoke", func() *cobra.Command { return newRevokeCmd(nil) }}, {"ui", func() *cobra.Command { return newUICmd(nil) }}, {"mcp-bridge", newMCPBridgeCmd}, {"hostexec", newHostexecCmd},
	{"version", newVersionCmd},
}
