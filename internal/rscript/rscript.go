// Package rscript runs the Lua scripts that the document buffer (package
// buffer) and the session queues (package session) share the handling of:
// scripts that change pinned state and count only once the required
// replicas have them (WAIT on the connection that ran them), the reload of
// a script Redis lost (NOSCRIPT), and the ownership and heartbeat leases
// of partitions and sidecars. It knows nothing of what the scripts do.
package rscript

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReplicationError says a script changed pinned state on the primary but
// fewer replicas than required confirmed it in time: what it did is not
// acknowledged (it may still take effect).
type ReplicationError struct{ Got, Want int }

func (e *ReplicationError) Error() string {
	return fmt.Sprintf("rscript: the write reached %d of the %d required Redis replicas in time", e.Got, e.Want)
}

// IsNoScript reports whether err is Redis's answer to an EVALSHA of a
// script it does not hold (first use, a restart, a failover).
func IsNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Call is one invocation of a script.
type Call struct {
	Script *redis.Script
	Keys   []string
	Args   []any
}

// Durable runs scripts that change pinned state: with Replicas > 0 each
// round trip ends with WAIT Replicas Timeout on the connection that ran its
// scripts, so that what they wrote counts only once the replicas have it.
type Durable struct {
	Client   redis.UniversalClient
	Replicas int // the minimum that must confirm
	Timeout  time.Duration
	// InSync, when set, makes a write wait for every in-sync replica (at
	// least Replicas) and refuses it at once, unrun, with fewer in sync.
	InSync *InSync

	awaited int // replicas this round trip waits for (RunAll)
}

// Run runs one call; see RunAll.
func (d Durable) Run(ctx context.Context, c Call) (reply any, repl, err error) {
	replies, errs, repls := d.RunAll(ctx, []Call{c})
	return replies[0], repls[0], errs[0]
}

// RunAll runs the calls in one round trip where it can, and returns each
// call's reply, its error, and what the replicas said of its writes (nil
// when none are required or they confirmed), which the caller heeds only
// for calls that wrote something.
//
// On one Redis node (standalone, Sentinel) the calls and one WAIT share a
// pipeline, which is one connection: the WAIT covers them all. In a Redis
// Cluster with replicas required, each call runs on its slot's primary
// with a WAIT of its own, held to that primary's in-sync replicas. Calls
// that found their script unloaded are run again once it is loaded.
func (d Durable) RunAll(ctx context.Context, calls []Call) (replies []any, errs, repls []error) {
	replies, errs, repls = make([]any, len(calls)), make([]error, len(calls)), make([]error, len(calls))
	cc, cluster := d.Client.(*redis.ClusterClient)
	if !cluster || d.Replicas <= 0 {
		if d.Replicas > 0 {
			inSync := -1
			if d.InSync != nil {
				inSync = d.InSync.Count()
			}
			await, err := d.await(inSync)
			if err != nil {
				for i := range errs {
					errs[i] = err
				}
				return replies, errs, repls
			}
			d.awaited = await
		}
		replies, errs, repl := d.round(ctx, d.Client, calls)
		for i := range repls {
			repls[i] = repl
		}
		return replies, errs, repls
	}
	// Each call is held to the in-sync replicas of the primary that owns
	// its key: one primary short of replicas refuses only its own writes.
	for i, c := range calls {
		node, err := cc.MasterForKey(ctx, c.Keys[0])
		if err != nil {
			errs[i] = err
			continue
		}
		inSync := -1
		if d.InSync != nil {
			inSync = d.InSync.CountOf(node.Options().Addr)
		}
		nd := d
		if nd.awaited, errs[i] = d.await(inSync); errs[i] != nil {
			continue
		}
		rs, es, r := nd.round(ctx, node, calls[i:i+1])
		replies[i], errs[i], repls[i] = rs[0], es[0], r
	}
	return replies, errs, repls
}

// round runs calls on node in one pipeline, then loads the scripts some
// found missing and runs those again.
func (d Durable) round(ctx context.Context, node redis.Cmdable, calls []Call) (replies []any, errs []error, repl error) {
	replies, errs = make([]any, len(calls)), make([]error, len(calls))
	todo := make([]int, len(calls))
	for i := range todo {
		todo[i] = i
	}
	for attempt := 0; len(todo) > 0; attempt++ {
		var cmds []*redis.Cmd
		var wait *redis.Cmd
		if len(todo) == 1 && d.Replicas <= 0 {
			c := calls[todo[0]]
			cmds = []*redis.Cmd{c.Script.EvalSha(ctx, node, c.Keys, c.Args...)}
		} else {
			pipe := node.Pipeline()
			for _, i := range todo {
				cmds = append(cmds, calls[i].Script.EvalSha(ctx, pipe, calls[i].Keys, calls[i].Args...))
			}
			if d.Replicas > 0 {
				wait = pipe.Do(ctx, "WAIT", max(d.Replicas, d.awaited), d.Timeout.Milliseconds())
			}
			_, _ = pipe.Exec(ctx) // each command carries its own error
		}
		var again []int
		for k, i := range todo {
			replies[i], errs[i] = cmds[k].Result()
			if IsNoScript(errs[i]) && attempt == 0 {
				if err := calls[i].Script.Load(ctx, node).Err(); err != nil {
					errs[i] = err
					continue
				}
				again = append(again, i)
			}
		}
		if wait != nil {
			if r := checkReplicas(wait, d.Replicas); r != nil {
				repl = r
			}
		}
		todo = again
	}
	return replies, errs, repl
}

// checkReplicas reads WAIT's answer: nil when want replicas confirmed.
func checkReplicas(wait *redis.Cmd, want int) error {
	n, err := wait.Int64()
	if err != nil {
		return fmt.Errorf("rscript: waiting for replicas: %w", err)
	}
	if int(n) < want {
		return &ReplicationError{Got: int(n), Want: want}
	}
	return nil
}

// Acquire takes or renews the ownership lease key for instance id: it
// reports whether id holds it for lifetime from now.
func Acquire(ctx context.Context, rdb redis.Cmdable, key, id string, lifetime time.Duration) (bool, error) {
	n, err := acquireScript.Run(ctx, rdb, []string{key}, id, lifetime.Milliseconds()).Int64()
	return n == 1, err
}

// Release gives up the ownership lease key if id holds it.
func Release(ctx context.Context, rdb redis.Cmdable, key, id string) error {
	return releaseScript.Run(ctx, rdb, []string{key}, id).Err()
}

// Heartbeat registers instance id as live for lifetime in the registry
// key, forgets the instances whose lifetime ran out, and returns how many
// are live.
func Heartbeat(ctx context.Context, rdb redis.Cmdable, key, id string, lifetime time.Duration) (int, error) {
	n, err := heartbeatScript.Run(ctx, rdb, []string{key}, id, lifetime.Milliseconds()).Int64()
	return int(n), err
}

// acquireScript takes or renews an ownership lease.
// KEYS: 1 owner key. ARGV: 1 instance id, 2 lifetime ms. Returns 1 if owned.
var acquireScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// releaseScript gives up ownership if still held. KEYS: 1 owner key.
// ARGV: 1 instance id.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// heartbeatScript registers a live instance and returns how many are live.
// KEYS: 1 registry (zset of instance → expiry ms). ARGV: 1 instance id,
// 2 lifetime ms.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return redis.call('ZCARD', KEYS[1])
`)
