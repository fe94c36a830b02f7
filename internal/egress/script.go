package egress

import (
	"fmt"
	"net/http"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/gateway"
	"github.com/airlock-dev/airlock/internal/policy/script"
)

// LoadPolicyScript reads and compiles the policy_script at path: an error
// is one line naming the script's file and line. print() lines go to log
// (nil: dropped), never to a terminal.
func LoadPolicyScript(path string, log *audit.Log, sandbox string) (*script.Script, error) {
	src, err := config.ReadRegular(path, script.MaxSource)
	if err != nil {
		return nil, fmt.Errorf("policy script: %w", err)
	}
	o := script.Options{}
	if log != nil {
		o.Print = func(fn, line string) {
			log.Write(audit.Record{Sandbox: sandbox, Kind: "network", Decision: "print", Rule: "script:" + path + ":" + fn, Reason: line})
		}
	}
	return script.New(path, src, o)
}

// scriptHooks runs the script's hooks before the embedding program's: the
// request before the secret swap (placeholders only), the response after
// redaction. A script's refusal stops the chain.
func scriptHooks(s *script.Script, h gateway.Hooks) gateway.Hooks {
	_, req, resp := s.Has()
	out := h
	if req {
		next := h.OnRequest
		out.OnRequest = func(r *http.Request) error {
			if err := s.OnRequest(r); err != nil {
				return err
			}
			if next != nil {
				return next(r)
			}
			return nil
		}
	}
	if resp {
		next := h.OnResponse
		out.OnResponse = func(r *http.Response) error {
			if err := s.OnResponse(r); err != nil {
				return err
			}
			if next != nil {
				return next(r)
			}
			return nil
		}
	}
	return out
}
