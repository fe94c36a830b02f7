package cleanup

import (
	"slices"
	"testing"
)

func TestCleanRunsTheUndosLastFirstAndOnce(t *testing.T) {
	var got []int
	var c Stack
	for i := range 3 {
		c.Add(func() { got = append(got, i) })
	}
	c.Add(nil) // a step that made nothing
	c.Clean()
	c.Clean()
	if want := []int{2, 1, 0}; !slices.Equal(got, want) {
		t.Errorf("ran %v, want %v", got, want)
	}
}

func TestReleaseLeavesNothingToTheFailurePath(t *testing.T) {
	var got []string
	var c Stack
	c.Add(func() { got = append(got, "first") })
	c.Add(func() { got = append(got, "second") })
	owned := c.Release()
	c.Clean() // the assembler's deferred Clean after a success
	if len(got) != 0 || c.Len() != 0 {
		t.Fatalf("a released stack still ran %v (len %d)", got, c.Len())
	}
	owned.Clean()
	if want := []string{"second", "first"}; !slices.Equal(got, want) {
		t.Errorf("the owner's teardown ran %v, want %v", got, want)
	}
}
