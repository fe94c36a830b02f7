package docker

import (
	"fmt"
	"strings"

	"github.com/airlock-dev/airlock/internal/dockerengine"
	cerrdefs "github.com/containerd/errdefs"
)

// Connect and EngineError are the engine client's (see dockerengine).
var (
	Connect     = dockerengine.Connect
	EngineError = dockerengine.EngineError
)

// Labels airlock puts on everything it makes, so that leftovers can be found
// after a crash without any record of them.
const (
	LabelSandbox = "airlock.sandbox" // the sandbox's ID
	LabelState   = "airlock.state"   // the state root of the airlock that made it
)

// ContainerName is the name of sandbox id's container.
func ContainerName(id string) string { return "airlock-" + id }

// imageError explains a container create that failed for want of its image.
func imageError(image string, err error) error {
	if cerrdefs.IsNotFound(err) && strings.Contains(strings.ToLower(err.Error()), "image") {
		hint := "pull or build it, or pass --image"
		if strings.HasPrefix(image, "airlock/") {
			hint = "build it with `airlock images build` (as root), or pass --image"
		}
		return fmt.Errorf("docker: image %s does not exist: %s", image, hint)
	}
	return nil
}

// isGone reports an error about a container that no longer exists (or is
// being removed already): the goal of a removal is met.
func isGone(err error) bool {
	return cerrdefs.IsNotFound(err) || strings.Contains(err.Error(), "already in progress")
}
