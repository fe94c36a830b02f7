package fakellm

import "net/http"

// routeGemini serves the Gemini API's endpoints on mux.
func (s *Server) routeGemini(mux *http.ServeMux) {}
