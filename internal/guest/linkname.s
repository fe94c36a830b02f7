// The guest declares runtime functions it calls through go:linkname
// (reaper.go's waitAny); an assembly file lets the compiler accept
// declarations without bodies. It holds no code.
