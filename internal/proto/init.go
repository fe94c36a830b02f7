package proto

// Init is everything the guest needs to build the sandbox. The host computes
// it (internal/backend/native), so the guest only carries out a plan.
type Init struct {
	Hostname string  `cbor:"1,keyasint"`
	Mounts   []Mount `cbor:"2,keyasint"` // applied in order onto the new root
	// Hide lists paths masked after every mount, whatever the flags: files read
	// as empty, directories as empty and read-only.
	Hide     []string `cbor:"3,keyasint,omitempty"`
	Workdir  string   `cbor:"4,keyasint"`
	Landlock Landlock `cbor:"5,keyasint"`
	Seccomp  bool     `cbor:"6,keyasint"`
	// Rlimits apply to the guest and so to everything it starts; used where
	// cgroups are unavailable, and for RLIMIT_NPROC (see CommandPids).
	Rlimits []Rlimit `cbor:"7,keyasint,omitempty"`
	// CommandPids, if not 0, is every command's process limit
	// (RLIMIT_NPROC: soft from its start, hard once it has started), which
	// the guest sets on each. The host leaves the guest itself room above
	// it (a higher pids.max, or Rlimits' RLIMIT_NPROC), so a command that
	// fills its limit cannot keep the guest's runtime from making a thread.
	// Without it the guest keeps spare threads instead (see
	// guest.spareThreads).
	CommandPids uint64 `cbor:"8,keyasint,omitempty"`
	// Relay, if set, has the guest accept TCP connections inside the sandbox
	// and pass each to a Unix socket mounted in from the host (the gateway's
	// front door).
	Relay *Relay `cbor:"9,keyasint,omitempty"`
	// Net, if set, gives the sandbox a TAP interface to the host's gateway.
	Net *Net `cbor:"10,keyasint,omitempty"`
	// Contained says the backend has built the sandbox already (a container
	// runtime made its mounts, namespaces and hostname, and dropped every
	// capability): the guest skips Mounts, Hide, Hostname and loopback, and
	// only locks itself down (rlimits, Landlock, seccomp).
	Contained bool `cbor:"20,keyasint,omitempty"`
	// VM says the guest is a virtual machine's init: its root, network and
	// control port are set up at boot (see guest.VMInit); the plan only adds
	// the sandbox's files and directories, then the guest locks down as on
	// any other backend.
	VM *VM `cbor:"21,keyasint,omitempty"`
	// Unplug, with Contained, says the runtime left the guest
	// CAP_NET_ADMIN and CAP_SETPCAP for its lockdown alone (a Kubernetes
	// Pod, whose network a NetworkPolicy may not bind): the guest deletes
	// every network interface but loopback, then drops every capability
	// as a native guest does, before any command runs.
	Unplug bool `cbor:"22,keyasint,omitempty"`
	// Files, with Contained, are written read-only before the lockdown,
	// their directories made: the host's files a remote sandbox cannot
	// bind (the CA bundle).
	Files []File `cbor:"23,keyasint,omitempty"`
}

// VM is what a VM guest makes before it serves: the host's files it cannot
// bind (their content travels here), and directories the sandbox expects.
type VM struct {
	Files []File   `cbor:"1,keyasint,omitempty"`
	Dirs  []string `cbor:"2,keyasint,omitempty"`
	// Shares are the paths the host serves on the VFS port: the guest
	// mounts that file system once and binds each of these from it.
	Shares []string `cbor:"3,keyasint,omitempty"`
}

// File is one file written inside, read-only.
type File struct {
	Path string `cbor:"1,keyasint"`
	Data []byte `cbor:"2,keyasint"`
}

// Relay is a TCP listener inside the sandbox whose connections the guest
// hands to the gateway: each one's descriptor, sent on the Unix socket.
type Relay struct {
	Listen string `cbor:"1,keyasint"`           // e.g. 127.0.0.1:3128
	Socket string `cbor:"2,keyasint,omitempty"` // path inside the sandbox
	// Back, instead of Socket, is a TCP address inside on which the host
	// keeps idle connections open from outside (a Pod's port-forward): each
	// accepted connection is joined to one of them, announced by one byte,
	// and its bytes copied both ways.
	Back string `cbor:"3,keyasint,omitempty"`
	// Token opens every back connection, sent by the host first: anything
	// inside may connect to Back too, and is not taken for the host.
	Token []byte `cbor:"4,keyasint,omitempty"`
}

// Mount kinds.
const (
	MountBind  = "bind"  // Source (a host path) at Target
	MountTmpfs = "tmpfs" // fresh tmpfs at Target
	MountProc  = "proc"  // fresh /proc with runtime masks
	MountDev   = "dev"   // minimal /dev
	// MountSysfs is a fresh read-only sysfs: it shows the sandbox's own
	// network namespace (lo, eth0), not the host's interfaces.
	MountSysfs = "sysfs"
	// MountOverlay is overlayfs at Target: Source (a host directory) is the
	// read-only lower layer, Upper (a host directory) takes every write,
	// Work is overlayfs' scratch dir on Upper's filesystem.
	MountOverlay = "overlay"
)

// Mount is one step of the plan. Target is an absolute path inside the sandbox.
type Mount struct {
	Kind     string `cbor:"1,keyasint"`
	Source   string `cbor:"2,keyasint,omitempty"`
	Target   string `cbor:"3,keyasint"`
	ReadOnly bool   `cbor:"4,keyasint,omitempty"`
	// SizeBytes caps a tmpfs; Mode is its root's permission bits.
	SizeBytes int64  `cbor:"5,keyasint,omitempty"`
	Mode      uint32 `cbor:"6,keyasint,omitempty"`
	// Optional mounts are skipped when Source does not exist.
	Optional bool `cbor:"7,keyasint,omitempty"`
	// Upper and Work are MountOverlay's writable layer and scratch dir.
	Upper string `cbor:"8,keyasint,omitempty"`
	Work  string `cbor:"9,keyasint,omitempty"`
	// FD, when not 0, says the host made this mount already: it is the
	// FD-th descriptor sent with OpMounts (1-based), a detached tree the
	// guest only attaches. For MountOverlay it is the lower layer, and the
	// next one is the directory holding Upper and Work (by their names).
	FD int `cbor:"10,keyasint,omitempty"`
}

// Landlock says where writes are allowed. Reads stay allowed everywhere the
// mounts show.
type Landlock struct {
	Enabled  bool     `cbor:"1,keyasint"`
	RWDirs   []string `cbor:"2,keyasint,omitempty"`
	RWFiles  []string `cbor:"3,keyasint,omitempty"`
	NoDelete []string `cbor:"4,keyasint,omitempty"` // writable, but nothing in them may be removed or renamed away
	Required bool     `cbor:"5,keyasint,omitempty"` // fail rather than warn when the kernel lacks it
}

// Rlimit is one setrlimit call.
type Rlimit struct {
	Resource int    `cbor:"1,keyasint"`
	Cur      uint64 `cbor:"2,keyasint"`
	Max      uint64 `cbor:"3,keyasint"`
}

// Net asks the guest for the sandbox's one network interface: a TAP device
// it creates and configures inside the sandbox's network namespace, whose
// descriptor it returns with Ready so the host's gateway reads every frame.
type Net struct {
	Device  string `cbor:"1,keyasint"` // interface name, e.g. eth0
	Addr    string `cbor:"2,keyasint"` // the sandbox's address with prefix, e.g. 10.0.2.15/24
	Gateway string `cbor:"3,keyasint"` // default route's next hop
	MTU     int    `cbor:"4,keyasint"`
	// FD, when not 0, is the OpMounts descriptor (1-based) of /dev/net/tun
	// opened by the host in the sandbox's network namespace, for a guest
	// that may not open it itself (root's sandboxes).
	FD int `cbor:"5,keyasint,omitempty"`
}
