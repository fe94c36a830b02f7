package engine

import (
	"os"
	"path/filepath"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/config"
)

// binInside is where the airlock binary appears inside a sandbox that has
// broker services, also under the names it answers to (hostexec,
// mcp-bridge), read-only; it is put first on PATH.
const binInside = "/run/airlock/bin"

// toolsInside shows exe (the airlock binary) inside and returns the
// environment that finds it.
func toolsInside(exe string, b *backend.Spec, env []string) []string {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return env
		}
	}
	for _, name := range []string{"airlock", "hostexec", "mcp-bridge"} {
		b.Files = append(b.Files, backend.FileMount{Source: exe, Target: filepath.Join(binInside, name)})
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := cutEnv(kv, "PATH"); ok {
			path = v
		}
	}
	return config.MergeEnv(env, []string{"PATH=" + binInside + ":" + path})
}

func cutEnv(kv, name string) (string, bool) {
	if len(kv) > len(name) && kv[:len(name)] == name && kv[len(name)] == '=' {
		return kv[len(name)+1:], true
	}
	return "", false
}
