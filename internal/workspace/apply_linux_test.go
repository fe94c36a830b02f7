package workspace

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
)

// A full disk while staging: nothing is applied and no temp file is left.
func TestApplyOnAFullDiskAppliesNothing(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	hostDir := t.TempDir()
	if err := syscall.Mount("tmpfs", hostDir, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	defer syscall.Unmount(hostDir, syscall.MNT_DETACH)
	tree(t, hostDir, map[string]string{"a": "old a", "b": "old b"})
	srcDir := t.TempDir()
	tree(t, srcDir, map[string]string{"a": "new a", "b": strings.Repeat("x", 1<<20)})
	before, _ := Scan(hostDir, ScanOptions{})
	after, _ := Scan(srcDir, ScanOptions{})
	_, err := Apply(hostDir, srcDir, Compare(before, after, nil), byBefore)
	if err == nil || !strings.Contains(err.Error(), "disk is full") || !strings.Contains(err.Error(), "nothing was applied") {
		t.Fatalf("Apply on a full disk: %v", err)
	}
	if got := readTree(t, hostDir); fmt.Sprint(got) != fmt.Sprint(map[string]string{"a": "old a", "b": "old b"}) {
		t.Fatalf("host after a failed apply: %v", got)
	}
}
