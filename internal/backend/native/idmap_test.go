package native

import (
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/internal/proto"
)

func TestOwnerMap(t *testing.T) {
	const base = 1 << 20
	tests := map[string]struct {
		owner uint32
		want  []syscall.SysProcIDMap
	}{
		"root's files: the whole slot, unshifted": {0, []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: 65536}}},
		"a user's: the owner is the slot's first id, others keep their place, root unmapped": {1000, []syscall.SysProcIDMap{
			{ContainerID: 1000, HostID: base, Size: 1}, {ContainerID: 1, HostID: base + 1, Size: 999}, {ContainerID: 1001, HostID: base + 1001, Size: 64535},
		}},
		"uid 1 has no ids below it but root": {1, []syscall.SysProcIDMap{
			{ContainerID: 1, HostID: base, Size: 1}, {ContainerID: 2, HostID: base + 2, Size: 65534},
		}},
		"an owner beyond the slot is mapped on its own": {200000, []syscall.SysProcIDMap{
			{ContainerID: 200000, HostID: base, Size: 1}, {ContainerID: 1, HostID: base + 1, Size: 65535},
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := ownerMap(tc.owner, base)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ownerMap(%d) = %v, want %v", tc.owner, got, tc.want)
			}
			// Never a host id twice, never outside the slot.
			seen := map[int]bool{}
			for _, m := range got {
				for i := 0; i < m.Size; i++ {
					h := m.HostID + i
					if seen[h] || h < base || h >= base+65536 {
						t.Fatalf("ownerMap(%d) maps host id %d twice or outside the slot", tc.owner, h)
					}
					seen[h] = true
				}
			}
		})
	}
}

func TestBlindParentsCoversOnlyDirsTheSandboxCannotSearch(t *testing.T) {
	// Not under t.TempDir, whose parent is 0700.
	root, err := os.MkdirTemp(os.Getenv("AIRLOCK_TEST_HOSTDIR"), "blind-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Dir(root)); err != nil || st.Mode().Perm()&0o001 == 0 {
		t.Skipf("%s cannot be searched by others: set AIRLOCK_TEST_HOSTDIR to a directory that can", filepath.Dir(root))
	}
	mk := func(p string, mode os.FileMode) string {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	open := mk("open", 0o755)
	closed := mk("closed", 0o700)
	deep := mk("closed/inner", 0o700)
	listable := mk("searchonly", 0o711)
	mounted := mk("bound", 0o700)
	mounts := []proto.Mount{
		{Kind: proto.MountBind, Target: filepath.Join(open, "ws")},
		{Kind: proto.MountBind, Target: filepath.Join(deep, "ws")},
		{Kind: proto.MountBind, Target: filepath.Join(listable, "ws")},
		{Kind: proto.MountBind, Target: mounted},
		{Kind: proto.MountBind, Target: filepath.Join(mounted, "sub/ws")}, // inside a bind: the plan shows it
	}
	got := blindParents(mounts)
	if want := []string{closed}; !reflect.DeepEqual(got, want) {
		t.Errorf("blindParents = %v, want %v", got, want)
	}
}
