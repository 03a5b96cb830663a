package buffer

import (
	"context"
	"time"
)

// maxCombined bounds the writes one combined round carries.
const maxCombined = 256

// combineTimeout bounds a combined round: it serves several requests, so
// it runs under none of their contexts.
const combineTimeout = 10 * time.Second

// maxRounds bounds the rounds in flight at once: a write starts at once
// unless two are already running, and the writes that arrive meanwhile
// share the next (groupcommit says why two).
const maxRounds = 2

// written is a write's result in a combined round.
type written struct {
	result WriteResult
	err    error
}

// combined runs reqs in a shared round (group commit: while maxRounds
// rounds are in Redis, the calls that arrive wait and then go together in
// the next, one round trip and a few script calls for all of them instead
// of one each) and returns their results.
func (b *Buffer) combined(ctx context.Context, reqs []WriteRequest) ([]WriteResult, []error) {
	out := b.comb.Do(ctx, reqs)
	results, errs := make([]WriteResult, len(out)), make([]error, len(out))
	for i, w := range out {
		results[i], errs[i] = w.result, w.err
	}
	return results, errs
}

// round runs the writes of a combined round as one batch.
func (b *Buffer) round(ctx context.Context, reqs []WriteRequest, _ int) []written {
	results, errs := b.writeBatch(ctx, reqs)
	out := make([]written, len(reqs))
	for i := range out {
		out[i] = written{results[i], errs[i]}
	}
	return out
}
