package images

import (
	"strings"
	"testing"
)

func TestParseMirror(t *testing.T) {
	cases := map[string]struct {
		text   string
		deb822 bool
		want   string
	}{
		"one-line main archive":                  {text: "deb http://deb.debian.org/debian bookworm main\n", want: "http://deb.debian.org/debian"},
		"security archive is skipped":            {text: "deb http://security.debian.org/debian-security bookworm-security main\ndeb http://mirror.local/debian/ bookworm main\n", want: "http://mirror.local/debian"},
		"options in brackets":                    {text: "deb [arch=amd64 signed-by=/k.gpg] https://m.example/debian bookworm main\n", want: "https://m.example/debian"},
		"deb-src and comments do not count":      {text: "# deb http://a/debian x main\ndeb-src http://b/debian x main\n", want: ""},
		"another vendor's repository is skipped": {text: "deb https://packages.cloud.google.com/apt cloud-sdk main\n", want: ""},
		"deb822 stanza":                          {deb822: true, text: "Types: deb\n# comment\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://deb.debian.org/debian-security\n", want: "http://deb.debian.org/debian"},
		"deb822 deb-src stanza is skipped":       {deb822: true, text: "Types: deb-src\nURIs: http://a/debian\n\nTypes: deb\nURIs: http://b/debian/\n", want: "http://b/debian"},
	}
	for name, c := range cases {
		if got := ParseMirror(strings.NewReader(c.text), c.deb822); got != c.want {
			t.Errorf("%s: ParseMirror = %q, want %q", name, got, c.want)
		}
	}
}
