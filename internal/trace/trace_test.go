package trace

import "testing"

func TestOffMeansNoChildEnvAndNoOutput(t *testing.T) {
	if on {
		t.Skip(Env + " is set in the test's environment")
	}
	if got := ChildEnv(); got != "" {
		t.Errorf("ChildEnv() = %q with tracing off, want \"\"", got)
	}
	Mark("nothing") // must not print or panic
	MarkCPU("nothing")
}

func TestChildEnvCarriesTheOrigin(t *testing.T) {
	saved, savedOrigin := on, origin
	defer func() { on, origin = saved, savedOrigin }()
	on = true
	got := ChildEnv()
	if len(got) <= len(Env)+1 || got[:len(Env)+1] != Env+"=" {
		t.Errorf("ChildEnv() = %q, want %s=<unix nanoseconds>", got, Env)
	}
}
