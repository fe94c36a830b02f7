//go:build !linux

package doctor

// Off Linux there is nothing to probe yet: the native backend's kernel
// features are Linux's, and the macOS backend that will plug in here is
// not written. Each check says so.

func unsupported(name string) Check {
	return Check{Name: name, Status: StatusMissing, Detail: "not Linux",
		Impact: "the native backend needs Linux; on this system no backend runs sandboxes yet"}
}

func probeUserNS() Check                  { return unsupported(NameUserNS) }
func probeMountAPI() Check                { return unsupported(NameMountAPI) }
func probeLandlock() Check                { return unsupported(NameLandlock) }
func probeSeccomp() Check                 { return unsupported(NameSeccomp) }
func probeCgroups() Check                 { return unsupported(NameCgroups) }
func probeTun() Check                     { return unsupported(NameTun) }
func probeOverlay(_ [2]int, _ bool) Check { return unsupported(NameOverlay) }
func probeIDs(bool) (Check, []string)     { return unsupported(NameIDs), nil }
