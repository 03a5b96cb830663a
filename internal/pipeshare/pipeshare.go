// Package pipeshare shares Redis round trips between concurrent callers:
// a go-redis hook that sends the commands and pipelines of the callers that
// arrive while earlier rounds are in Redis together, as one pipeline on one
// connection — one write and one read for all of them instead of one each,
// on both sides of the socket (client-side automatic pipelining, as
// rueidis does it).
//
// A caller's commands stay contiguous and in its order, and each caller is
// answered only when its round is: nothing any caller can observe changes
// but the time it waits. What cannot share a connection's round goes alone:
// transactions (MULTI … EXEC), WAIT and every blocking or connection-state
// command, which would hold the round or change the connection for the
// others; so do a redis.Conn's commands (OnConnect's), which must run on
// that connection. A caller whose context is done before it joins a round sends
// nothing; once it has joined, it waits for the round's answer (bounded by
// the connection's timeouts), as a caller waits for a reply it has sent.
package pipeshare

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/groupcommit"
)

// maxRounds bounds the rounds in flight at once: a caller that finds fewer
// goes at once, and the callers that arrive meanwhile wait for a round to
// end and share the next. Four, not the two groupcommit argues for: the
// sidecar shares its node's CPUs with the application and the stores, so a
// round's answer waits for its reader to be scheduled as well as for
// Redis, and with two in flight Redis sat idle meanwhile. TPC-C's
// write-back sessions ran ~6 % more transactions with four, at no more CPU
// per transaction; eight did no better (benchmarks/README, session 25).
const maxRounds = 4

// maxCommands bounds the commands of one shared round (a larger call goes
// alone), so that no caller's answer waits behind an unbounded reply.
const maxCommands = 512

// roundTimeout bounds a shared round: it serves several callers, so it runs
// under none of their contexts (the connection's read and write timeouts
// apply as well).
const roundTimeout = 10 * time.Second

// Hook is the go-redis hook; Share installs one.
type Hook struct {
	c     *redis.Client
	group *groupcommit.Group[redis.Cmder, struct{}] // runs the shared rounds

	calls, sent prometheus.Counter // calls sent in shared rounds, and those rounds

	// installing is true while Share adds the hook: the chains go-redis
	// builds then are the client's own, and share. Any chain it builds
	// later from the same hooks passes every command through: go-redis
	// v9.7 gives a redis.Conn (OnConnect's) no hooks, and should a later
	// version hand it the client's, its commands must still run on that
	// connection (TestConnectionsOwnCommandsGoAlone).
	installing atomic.Bool
}

// Share installs a Hook on c: from then on, c's commands and pipelines
// share round trips. It counts the calls sent in shared rounds in calls,
// and the rounds in rounds: their ratio is the round trips saved.
//
// c is one node's client (standalone, or Sentinel's failover client): a
// round is sent as c's own pipelines are. go-redis's cluster client is not
// one — it routes each node's share of a pipeline, and a few commands
// (SCRIPT LOAD to every primary), with functions of its own that a shared
// round would bypass.
func Share(c *redis.Client, calls, rounds prometheus.Counter) *Hook {
	h := &Hook{c: c, calls: calls, sent: rounds}
	h.group = groupcommit.New(maxRounds, maxCommands, roundTimeout, h.round)
	h.installing.Store(true)
	c.AddHook(h)
	h.installing.Store(false)
	return h
}

type roundKey struct{}

// DialHook does nothing.
func (h *Hook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook sends a single command in a shared round.
func (h *Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	if !h.installing.Load() {
		return next
	}
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(roundKey{}) != nil || !shareable(cmd) {
			return next(ctx, cmd)
		}
		h.run(ctx, []redis.Cmder{cmd})
		return cmd.Err()
	}
}

// ProcessPipelineHook sends a pipeline in a shared round. go-redis runs
// transactions through the same hook: they go alone.
func (h *Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	if !h.installing.Load() {
		return next
	}
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(roundKey{}) != nil || len(cmds) > maxCommands || !allShareable(cmds) {
			return next(ctx, cmds)
		}
		h.run(ctx, cmds)
		return firstErr(cmds)
	}
}

// run sends cmds in a shared round and waits for their replies; a caller
// whose context is done already sends nothing.
func (h *Hook) run(ctx context.Context, cmds []redis.Cmder) {
	if err := ctx.Err(); err != nil {
		for _, cmd := range cmds {
			cmd.SetErr(err)
		}
		return
	}
	h.group.Do(ctx, cmds)
}

// round sends the commands of a round's calls as one pipeline, which
// roundKey passes through the hook.
func (h *Hook) round(ctx context.Context, cmds []redis.Cmder, calls int) []struct{} {
	pipe := h.c.Pipeline()
	ctx = context.WithValue(ctx, roundKey{}, true)
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, cmd)
	}
	if _, err := pipe.Exec(ctx); err != nil && firstErr(cmds) == nil {
		// No connection: go-redis returns the error without setting it
		// on the commands, none of which was sent.
		for _, cmd := range cmds {
			cmd.SetErr(err)
		}
	}
	h.calls.Add(float64(calls))
	h.sent.Inc()
	return make([]struct{}, len(cmds))
}

// firstErr is the error of the first command that failed, as
// Pipeliner.Exec returns it.
func firstErr(cmds []redis.Cmder) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

func allShareable(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if !shareable(c) {
			return false
		}
	}
	return true
}

// shareable reports whether cmd may share a connection's round with other
// callers' commands: not a transaction, not WAIT or a blocking command,
// nothing that changes the connection's state.
func shareable(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "multi", "exec", "discard", "watch", "unwatch",
		"wait", "waitaof",
		"blpop", "brpop", "brpoplpush", "blmove", "blmpop", "bzpopmin", "bzpopmax", "bzmpop",
		"xread", "xreadgroup",
		"subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe", "monitor",
		"select", "auth", "hello", "client", "reset", "quit", "readonly", "readwrite", "asking":
		return false
	}
	return true
}
