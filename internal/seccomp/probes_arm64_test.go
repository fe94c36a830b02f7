package seccomp

// archProbes has nothing arm64-specific: there is no second ABI to refuse.
var archProbes []probe
