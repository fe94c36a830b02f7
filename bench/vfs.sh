#!/usr/bin/env bash
# The VFS mount's cost, side by side in one run: small-file writes and
# reads (500 x 4 KiB) and an npm-install-like metadata storm (2,000 files in
# 200 nested dirs: create, stat, remove) on a plain host directory and on
# FUSE mounts served the way the VM serves them (host kernel /dev/fuse →
# vfs.GuestRelay → a stream socket standing for virtio-serial →
# vfs.ServeStream → RealDir, Overlay or Memory). Prints ms and the ratio to
# the host dir. Under QEMU each FUSE round trip also crosses virtio-serial
# (~0.3 ms under TCG), which this does not include. Needs root and /dev/fuse.
set -euo pipefail
cd "$(dirname "$0")/.."
VFS_BENCH=1 go test -count=1 -run TestVFSBenchReport -v ./internal/vfs/ | grep -v '^=== RUN'
