package config

import "testing"

func TestAppendOptionsKeepsTheUsersAndAddsAirlocks(t *testing.T) {
	const k = "JAVA_TOOL_OPTIONS"
	ours := []string{"A=1", k + "=-Dx=airlock"}
	for name, tc := range map[string]struct {
		base []string
		want string
	}{
		"the user set none":           {[]string{"B=2"}, "-Dx=airlock"},
		"the user's come first":       {[]string{k + "=-Xmx1g -Dx=mine"}, "-Xmx1g -Dx=mine -Dx=airlock"},
		"an empty value is not added": {[]string{k + "= "}, "-Dx=airlock"},
	} {
		t.Run(name, func(t *testing.T) {
			merged := MergeEnv(tc.base, AppendOptions(tc.base, ours, k))
			if got, _ := LookupEnv(merged, k); got != tc.want {
				t.Errorf("%s = %q, want %q", k, got, tc.want)
			}
			// Merging again (an environment handed back) adds nothing.
			again := MergeEnv(merged, AppendOptions(merged, merged, k))
			if got, _ := LookupEnv(again, k); got != tc.want {
				t.Errorf("merged twice: %s = %q, want %q", k, got, tc.want)
			}
		})
	}
}
