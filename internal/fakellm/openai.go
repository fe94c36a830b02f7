package fakellm

import "net/http"

// routeOpenAI serves the OpenAI API's endpoints on mux.
func (s *Server) routeOpenAI(mux *http.ServeMux) {}
