package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestMergeEnvAppendsGitEnvironmentConfig(t *testing.T) {
	user := []string{"A=1", "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=user.name", "GIT_CONFIG_VALUE_0=Mine"}
	ours := append([]string{"TOKEN=ph"}, GitConfigEnv([][2]string{{"credential.https://github.com.helper", ""}, {"url.https://github.com/.insteadOf", "git@github.com:"}})...)
	for name, c := range map[string]struct {
		base, extra []string
		want        [][2]string
	}{
		"the user's entries come first, then airlock's": {user, ours,
			[][2]string{{"user.name", "Mine"}, {"credential.https://github.com.helper", ""}, {"url.https://github.com/.insteadOf", "git@github.com:"}}},
		"an exec's entries follow the sandbox's": {ours, user,
			[][2]string{{"credential.https://github.com.helper", ""}, {"url.https://github.com/.insteadOf", "git@github.com:"}, {"user.name", "Mine"}}},
		"an environment handed back is not doubled": {ours, MergeEnv(ours, user),
			[][2]string{{"credential.https://github.com.helper", ""}, {"url.https://github.com/.insteadOf", "git@github.com:"}, {"user.name", "Mine"}}},
		"one side alone is kept": {[]string{"A=1"}, ours,
			[][2]string{{"credential.https://github.com.helper", ""}, {"url.https://github.com/.insteadOf", "git@github.com:"}}},
		"a malformed count is plain text, later wins": {[]string{"GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=a.b", "GIT_CONFIG_VALUE_0=c"}, ours,
			[][2]string{{"credential.https://github.com.helper", ""}, {"url.https://github.com/.insteadOf", "git@github.com:"}}},
	} {
		t.Run(name, func(t *testing.T) {
			got := MergeEnv(c.base, c.extra)
			pairs, ok := gitConfigOf(got)
			if !ok || !reflect.DeepEqual(pairs, c.want) {
				t.Errorf("MergeEnv git config = %q (%v), want %q\nenv: %q", pairs, ok, c.want, got)
			}
			n := 0
			for _, e := range got {
				if strings.HasPrefix(e, "GIT_CONFIG_COUNT=") {
					n++
				}
			}
			if n != 1 {
				t.Errorf("GIT_CONFIG_COUNT appears %d times: %q", n, got)
			}
		})
	}
}

func TestASecretsGitAndGitHubAppKeysBecomeItsFlag(t *testing.T) {
	text := "secrets:\n" +
		"  - {name: GH_TOKEN, command: gh auth token, hosts: [github.com], git: true}\n" +
		"  - {name: GL_TOKEN, env: GL, hosts: [gitlab.com], git: oauth2}\n" +
		"  - name: APP_TOKEN\n" +
		"    github_app: {app_id: 12, installation_id: 34, private_key: /keys/app.pem, repositories: [org/demo, tools], permissions: {contents: write}, api: 'https://ghe.example.com/api/v3'}\n" +
		"    hosts: [ghe.example.com]\n" +
		"    git: true\n"
	l, err := Parse("cfg.yaml", []byte(text), SourceGlobal)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := Merge(l)
	want := []string{
		"GH_TOKEN=cmd:gh auth token@github.com:git",
		"GL_TOKEN=env:GL@gitlab.com:git=oauth2",
		"APP_TOKEN=github-app:app=12;installation=34;key=/keys/app.pem;repos=org/demo,tools;permissions=contents:write;api=https://ghe.example.com/api/v3@ghe.example.com:git",
	}
	if !reflect.DeepEqual(flagsOf(s.Network.Secrets), want) {
		t.Errorf("secrets = %q\nwant %q", flagsOf(s.Network.Secrets), want)
	}
	for name, c := range map[string]struct{ text, want string }{
		"an app without repositories": {"secrets:\n  - {name: A, github_app: {app_id: 1, installation_id: 2, private_key: /k}, hosts: [github.com]}\n", "no repositories"},
		"an unknown app key":          {"secrets:\n  - {name: A, github_app: {app_id: 1, installation: 2}, hosts: [github.com]}\n", "unknown key"},
		"a separator in a value":      {"secrets:\n  - {name: A, github_app: {app_id: 1, installation_id: 2, private_key: '/k;repos=x', repositories: [a]}, hosts: [github.com]}\n", "without ; , = or @"},
		"a git that is a list":        {"secrets:\n  - {name: A, hosts: [github.com], git: [x]}\n", "expected true, or the user name"},
		"two sources":                 {"secrets:\n  - {name: A, env: B, github_app: {app_id: 1, installation_id: 2, private_key: /k, repositories: [a]}, hosts: [github.com]}\n", "more than one"},
	} {
		if _, err := Parse("cfg.yaml", []byte(c.text), SourceGlobal); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: Parse = %v, want one line with %q", name, err, c.want)
		}
	}
}

func FuzzMergeEnvGitConfig(f *testing.F) {
	f.Add("GIT_CONFIG_COUNT=1\nGIT_CONFIG_KEY_0=a.b\nGIT_CONFIG_VALUE_0=c", "GIT_CONFIG_COUNT=1\nGIT_CONFIG_KEY_0=d.e\nGIT_CONFIG_VALUE_0=")
	f.Add("GIT_CONFIG_COUNT=99999999999", "GIT_CONFIG_COUNT=-1")
	f.Fuzz(func(t *testing.T, a, b string) {
		got := MergeEnv(strings.Split(a, "\n"), strings.Split(b, "\n"))
		if pairs, ok := gitConfigOf(got); ok && len(pairs) > 2*maxGitConfig {
			t.Fatalf("MergeEnv made %d entries", len(pairs))
		}
	})
}
