package fakellm

import "net/http"

// routeAnthropic serves the Anthropic API's endpoints on mux.
func (s *Server) routeAnthropic(mux *http.ServeMux) {}
