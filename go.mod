module github.com/airlock-dev/airlock

go 1.26.8

require (
	github.com/creack/pty v1.1.24
	github.com/fxamacker/cbor/v2 v2.9.6
	github.com/landlock-lsm/go-landlock v0.11.0
	github.com/miekg/dns v1.1.73
	github.com/spf13/cobra v1.10.2
	github.com/vishvananda/netlink v1.3.1
	golang.org/x/sys v0.49.0
	golang.org/x/term v0.47.0
	gvisor.dev/gvisor v0.0.0-20260905035102-160fafc42237
	kernel.org/pub/linux/libs/security/libcap/psx v1.2.77
)

require (
	github.com/google/btree v1.1.2 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	golang.org/x/exp v0.0.0-20250711185948-6ae5c78190dc // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/time v0.15.0 // indirect
)
