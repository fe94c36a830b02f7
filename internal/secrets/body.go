package secrets

// SwapsBody reports whether SwapBody may change a request body toward host
// (some secret allowed there opts into body swaps), so the caller knows the
// body's length may change and must be sent without a fixed Content-Length.
func (s *Set) SwapsBody(host string) bool {
	if s == nil {
		return false
	}
	h := canonHost(host)
	for _, c := range s.secrets {
		if c.InBody && c.allowed(h) {
			return true
		}
	}
	return false
}
