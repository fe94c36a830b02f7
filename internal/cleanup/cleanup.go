// Package cleanup undoes a multi-step assembly in reverse: each step that
// made something adds how to undo it; an error anywhere runs the undos
// last-first; success releases them to whoever owns the result.
package cleanup

// Stack is undos in the order their steps ran. The zero value is empty and
// ready; it is not safe for concurrent use.
type Stack struct {
	undo []func()
}

// Add pushes f, to run before every undo added earlier.
func (c *Stack) Add(f func()) {
	if f != nil {
		c.undo = append(c.undo, f)
	}
}

// Clean runs the undos last-first and empties the stack: deferred by the
// assembler, it undoes everything unless Release ran first.
func (c *Stack) Clean() {
	for len(c.undo) > 0 {
		f := c.undo[len(c.undo)-1]
		c.undo = c.undo[:len(c.undo)-1]
		f()
	}
}

// Release hands the undos over: the stack is empty after it, and the
// returned Stack runs them when the owner tears down.
func (c *Stack) Release() *Stack {
	out := &Stack{undo: c.undo}
	c.undo = nil
	return out
}

// Len is how many undos wait.
func (c *Stack) Len() int { return len(c.undo) }
