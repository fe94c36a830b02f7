package native

import (
	"os"

	"github.com/airlock-dev/airlock/internal/guest"
	"github.com/airlock-dev/airlock/internal/guestbin"
	"github.com/airlock-dev/airlock/internal/trace"
)

// selfExe is this binary, re-executed as the guest when no other is given
// and no lean guest is built in.
const selfExe = "/proc/self/exe"

// The guest is started with descriptors 0..guest.ControlFD: the lean
// guest's descriptor must lie above those the start rearranges (see
// guestbin.MinFD), or this fails to compile.
var _ [guestbin.MinFD/2 - 1 - (guest.ControlFD + 1)]struct{}

// leanGuest opens the lean guest built into this binary from its cache in
// dir, or returns nil and says in the trace why this binary is re-executed
// instead.
func leanGuest(dir string) *os.File {
	why := guestbin.Missing()
	if why == "" && dir == "" {
		why = "no cache directory given"
	}
	if why == "" {
		f, err := guestbin.Open(dir)
		if err == nil {
			trace.Mark("native: lean guest opened")
			return f
		}
		why = err.Error()
	}
	trace.Mark("native: the guest is this binary re-executed (lean guest: " + why + ")")
	return nil
}
