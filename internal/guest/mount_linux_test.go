package guest

import (
	"testing"

	"github.com/airlock-dev/airlock/internal/proto"
)

func TestInFreshTmpfsOnlyWhereNothingOfThePlanIs(t *testing.T) {
	mounts := []proto.Mount{
		{Kind: proto.MountTmpfs, Target: "/tmp"},
		{Kind: proto.MountTmpfs, Target: "/root", ReadOnly: true},
		{Kind: proto.MountDev, Target: "/dev"},
		{Kind: proto.MountBind, Target: "/root/work/proj"},
		{Kind: proto.MountBind, Target: "/home/u"},
	}
	for _, c := range []struct {
		path string
		want bool
	}{
		{"/root/.ssh", true},            // inside the empty tmpfs
		{"/tmp/x/y", true},              // inside the empty tmpfs
		{"/root", false},                // the tmpfs itself
		{"/root/work", false},           // holds a mountpoint of the plan
		{"/root/work/proj", false},      // a mount of the plan
		{"/root/work/proj/.ssh", false}, // inside a bind below the tmpfs
		{"/home/u/.ssh", false},         // inside a bind
		{"/dev/foo", false},             // /dev is made with entries
		{"/etc/shadow", false},          // the host's root
		{"/", false},
	} {
		if got := inFreshTmpfs(mounts, c.path); got != c.want {
			t.Errorf("inFreshTmpfs(%s) = %v, want %v", c.path, got, c.want)
		}
	}
}

func TestInFreshTmpfsIsFalseUnderABindStackedOnTheTmpfs(t *testing.T) {
	// The home as the workspace: the home's tmpfs, then the workspace bound
	// over it at the same target (the plan's order).
	mounts := []proto.Mount{
		{Kind: proto.MountTmpfs, Target: "/home/u"},
		{Kind: proto.MountBind, Target: "/home/u"},
	}
	if inFreshTmpfs(mounts, "/home/u/.ssh") {
		t.Error("/home/u/.ssh is in the bind over the tmpfs, and must be hidden")
	}
	if !inFreshTmpfs(mounts[:1], "/home/u/.ssh") {
		t.Error("with only the tmpfs, /home/u/.ssh cannot exist")
	}
}
