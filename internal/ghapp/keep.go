package ghapp

import (
	"context"
	"time"
)

// Keeper replaces a token before it lapses for as long as its context lives.
type Keeper struct {
	Minter interface {
		Mint(ctx context.Context, now time.Time) (Token, error)
	}
	// Rotate hands each new token on (to a secrets.Rotator, whose Set the
	// gateway reads at every request, so a running sandbox picks it up).
	Rotate func(value []byte) error
	// OnError hears failed refreshes; it is never given a token.
	OnError func(error)
	// Now and After are the clock; nil is the real one (tests pass a fake).
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
}

// Next is when a token expiring at exp is replaced: RefreshBefore its expiry
// (or halfway there, for a token that lives less than twice that), never
// more than MaxLifetime after now. A token already expired is retried after
// a pause rather than at once, so a broken clock cannot spin the loop.
func Next(now, exp time.Time) time.Time {
	if latest := now.Add(MaxLifetime); exp.After(latest) {
		exp = latest
	}
	left := exp.Sub(now)
	if left <= 0 {
		return now.Add(retryEvery)
	}
	return exp.Add(-min(RefreshBefore, left/2))
}

// Run keeps the token fresh until ctx ends. cur is the token minted at start.
// A failed refresh is retried every 30 s until it works; the old token stays
// in use meanwhile (it may still be valid), and GitHub's refusal after it
// expires is what the sandbox then sees.
func (k *Keeper) Run(ctx context.Context, cur Token) {
	now, after := k.Now, k.After
	if now == nil {
		now = time.Now
	}
	if after == nil {
		after = time.After
	}
	at := Next(now(), cur.Expires)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-after(max(0, at.Sub(now()))):
		}
		t, err := k.Minter.Mint(ctx, now())
		if err == nil {
			err = k.Rotate([]byte(t.Value))
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if k.OnError != nil {
				k.OnError(err)
			}
			at = now().Add(retryEvery)
			continue
		}
		cur = t
		at = Next(now(), cur.Expires)
	}
}
