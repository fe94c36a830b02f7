package config

import (
	"reflect"
	"slices"
	"testing"

	"github.com/airlock-dev/airlock/internal/secrets"
)

// mustSpecs parses secrets in --secret form.
func mustSpecs(t *testing.T, flags ...string) []secrets.Spec {
	t.Helper()
	var out []secrets.Spec
	for _, f := range flags {
		sp, err := secrets.ParseSpec(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, sp)
	}
	return out
}

// flagsOf writes secrets back in --secret form.
func flagsOf(ss []secrets.Spec) []string {
	var out []string
	for _, sp := range ss {
		out = append(out, sp.String())
	}
	return out
}

// Spec fields that no config key sets: where the run is, not how it is
// configured.
var notSettings = []string{"Workspace.Path", "Agents.By"}

// A setting is one schema entry: each names a distinct place in the Spec of
// a type Merge and Show know, and every place in the Spec is one entry's
// (or listed in notSettings).
func TestConfigSchemaCoversTheSpec(t *testing.T) {
	var s Spec
	at := map[uintptr]string{}
	for _, f := range schema {
		if f.to == nil {
			continue
		}
		p := reflect.ValueOf(f.to(&s))
		switch f.to(&s).(type) {
		case *string, *bool, *int64, *int, *float64, *[]string, *[]secrets.Spec, *[]HostCommand, *map[string]Price, *any:
		default:
			if p.Type().String() != "*time.Duration" {
				t.Errorf("%s: Merge and Show do not know %s", f.key, p.Type())
			}
		}
		if other, dup := at[p.Pointer()]; dup {
			t.Errorf("%s and %s set the same field", f.key, other)
		}
		at[p.Pointer()] = f.key
	}
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		if _, ok := at[v.Addr().Pointer()]; ok && v.Kind() != reflect.Struct {
			return
		}
		if v.Kind() == reflect.Struct && v.Type().PkgPath() == reflect.TypeOf(s).PkgPath() {
			for i := 0; i < v.NumField(); i++ {
				if f := v.Type().Field(i); f.IsExported() {
					walk(v.Field(i), path+"."+f.Name)
				}
			}
			return
		}
		if name := path[1:]; !slices.Contains(notSettings, name) {
			t.Errorf("Spec.%s is set by no schema entry", name)
		}
	}
	walk(reflect.ValueOf(&s).Elem(), "")

	// One agent's settings (Spec.Agents.By[NAME]) are the agents.* entries.
	var a Agent
	for _, f := range schema {
		if f.toAgent == nil {
			continue
		}
		if !f.wild() || f.to != nil {
			t.Errorf("%s: toAgent is for agents.* keys alone", f.key)
		}
		p := reflect.ValueOf(f.toAgent(&a))
		if other, dup := at[p.Pointer()]; dup {
			t.Errorf("%s and %s set the same field", f.key, other)
		}
		at[p.Pointer()] = f.key
	}
	walk(reflect.ValueOf(&a).Elem(), ".Agents.By[NAME]")
}

// Every run flag sets a distinct key.
func TestConfigRunFlagsAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range RunFlags() {
		if seen[f.Flag] || lookup(f.Key) == nil {
			t.Errorf("run flag --%s (key %s) is repeated or has no key", f.Flag, f.Key)
		}
		seen[f.Flag] = true
	}
}
