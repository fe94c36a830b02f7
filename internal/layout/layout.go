// Package layout holds only a test: the rules for which of airlock's
// packages may import which, each with its reason, checked against the code.
package layout
