package approval

import (
	"context"
	"time"
)

type QueueConfig struct {
	Sandbox    string
	Timeout    time.Duration
	MaxPending int
	Rate       float64
	Burst      int
	Observe    func(Event)
	Now        func() time.Time
}
type Queue struct{}

func NewQueue(c QueueConfig) *Queue                                       { panic(0) }
func (q *Queue) Ask(ctx context.Context, r Request) Decision              { panic(0) }
func (q *Queue) Pending() []Request                                       { panic(0) }
func (q *Queue) Decide(id string, d Decision) error                       { panic(0) }
func (q *Queue) Recheck(match func(Request) (Decision, bool))             { panic(0) }
func (q *Queue) Subscribe(buf int) (<-chan Event, func())                 { panic(0) }
func (q *Queue) Close()                                                   { panic(0) }
func RuleFor(r Request, d Decision, project string, now time.Time) Rule   { panic(0) }
func Match(rules []Rule, host string, port uint16, now time.Time) (Decision, bool) { panic(0) }

type Store struct{}

func OpenStore(dir string) (*Store, error)                                    { panic(0) }
func (s *Store) Rules(project string) []Rule                                  { panic(0) }
func (s *Store) All() []Rule                                                  { panic(0) }
func (s *Store) Add(r Rule) (Rule, error)                                     { panic(0) }
func (s *Store) Revoke(id string) (Rule, error)                               { panic(0) }
func (s *Store) Watch(ctx context.Context, every time.Duration, changed func()) { panic(0) }
func ParseRules(name string, data []byte) ([]Rule, error)                     { panic(0) }
