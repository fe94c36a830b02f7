package seccomp

import (
	"slices"

	"golang.org/x/sys/unix"
)

type namedSyscall struct {
	name string
	nr   uintptr
}

// commonDenied are refused with EPERM on every supported arch: tracing other
// processes, mounts and namespaces (the sandbox's own setup must stay put),
// kernel keyrings, eBPF, perf, kernel modules and kexec, io_uring and
// userfaultfd (large attack surface), file handles (escape bind mounts),
// and the rest of what Docker's default profile refuses. seccomp(2) and the
// landlock syscalls stay allowed: stacking further restrictions is harmless.
var commonDenied = []namedSyscall{
	{"ptrace", unix.SYS_PTRACE},
	{"process_vm_readv", unix.SYS_PROCESS_VM_READV},
	{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV},
	{"kcmp", unix.SYS_KCMP},

	{"mount", unix.SYS_MOUNT},
	{"umount2", unix.SYS_UMOUNT2},
	{"pivot_root", unix.SYS_PIVOT_ROOT},
	{"move_mount", unix.SYS_MOVE_MOUNT},
	{"open_tree", unix.SYS_OPEN_TREE},
	{"open_tree_attr", unix.SYS_OPEN_TREE_ATTR},
	{"fsopen", unix.SYS_FSOPEN},
	{"fsconfig", unix.SYS_FSCONFIG},
	{"fsmount", unix.SYS_FSMOUNT},
	{"fspick", unix.SYS_FSPICK},
	{"mount_setattr", unix.SYS_MOUNT_SETATTR},
	{"setns", unix.SYS_SETNS},

	{"keyctl", unix.SYS_KEYCTL},
	{"add_key", unix.SYS_ADD_KEY},
	{"request_key", unix.SYS_REQUEST_KEY},

	{"bpf", unix.SYS_BPF},
	{"perf_event_open", unix.SYS_PERF_EVENT_OPEN},
	{"fanotify_init", unix.SYS_FANOTIFY_INIT},
	{"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE},

	{"kexec_load", unix.SYS_KEXEC_LOAD},
	{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD},
	{"init_module", unix.SYS_INIT_MODULE},
	{"finit_module", unix.SYS_FINIT_MODULE},
	{"delete_module", unix.SYS_DELETE_MODULE},
	{"reboot", unix.SYS_REBOOT},
	{"swapon", unix.SYS_SWAPON},
	{"swapoff", unix.SYS_SWAPOFF},
	{"acct", unix.SYS_ACCT},
	{"quotactl", unix.SYS_QUOTACTL},
	{"quotactl_fd", unix.SYS_QUOTACTL_FD},
	{"nfsservctl", unix.SYS_NFSSERVCTL},
	{"syslog", unix.SYS_SYSLOG},
	{"vhangup", unix.SYS_VHANGUP},
	{"lsm_set_self_attr", unix.SYS_LSM_SET_SELF_ATTR},

	{"io_uring_setup", unix.SYS_IO_URING_SETUP},
	{"io_uring_enter", unix.SYS_IO_URING_ENTER},
	{"io_uring_register", unix.SYS_IO_URING_REGISTER},
	{"userfaultfd", unix.SYS_USERFAULTFD},
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT},
	{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT},

	{"clock_adjtime", unix.SYS_CLOCK_ADJTIME},
	{"clock_settime", unix.SYS_CLOCK_SETTIME},
	{"settimeofday", unix.SYS_SETTIMEOFDAY},
	{"adjtimex", unix.SYS_ADJTIMEX},

	{"mbind", unix.SYS_MBIND},
	{"set_mempolicy", unix.SYS_SET_MEMPOLICY},
	{"set_mempolicy_home_node", unix.SYS_SET_MEMPOLICY_HOME_NODE},
	{"get_mempolicy", unix.SYS_GET_MEMPOLICY},
	{"move_pages", unix.SYS_MOVE_PAGES},
	{"migrate_pages", unix.SYS_MIGRATE_PAGES},
}

func deniedSyscalls() []namedSyscall { return slices.Concat(commonDenied, archDenied) }
