package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/jitter"
	"github.com/writeback/writeback/internal/jsonscan"
	"github.com/writeback/writeback/internal/lease"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/rscript"
	"github.com/writeback/writeback/mappings"
)

// The read path: a key read in a session under an S or X lease, read
// outside one (a plain GET), and its miss, which applies the queue through
// the last session the entry depends on before loading it.

// readAttempts bounds the tries of a read whose lease is refused by a
// golden S (a commit in progress): a few short backoffs ride it out;
// longer conflicts abort.
const readAttempts = 4

// Read returns the value of a mapped cache key. In a session (id not
// empty) it first takes an S lease on it (X with forUpdate), which the
// commit validates, waiting for a conflicting lease under the wound-wait
// rule (package lease) for at most Config.LeaseWait; a lease not granted
// within it aborts the session (AbortedError). On a miss it applies the
// key's queue through the last pending session the key depends on, loads
// the value through the mapping and installs it under an I lease.
func (s *Service) Read(ctx context.Context, id, key string, forUpdate bool) (json.RawMessage, error) {
	vals, err := s.ReadMany(ctx, id, []string{key}, forUpdate)
	if err != nil {
		return nil, err
	}
	if vals[0] == nil {
		return nil, ErrNotFound
	}
	return vals[0], nil
}

// peek serves reads outside a session from the entries that are cached:
// the copies this process keeps of immutable mappings' entries
// (fixedCopies), then one round trip of plain GETs, no script. Such a read
// takes no lease, and an entry changes only inside the commit that changes
// it (one script), so a cached entry is the latest committed value
// whatever leases its key has. vals[i] is nil for a miss, which goes
// through readScript (the I lease of its fill).
func (s *Service) peek(ctx context.Context, refs []ref) ([]json.RawMessage, error) {
	vals := make([]json.RawMessage, len(refs))
	pipe := s.rdb.Pipeline()
	gets := s.getPeeks(ctx, pipe, refs, vals)
	if len(gets.cmds) > 0 {
		_, _ = pipe.Exec(ctx) // each command carries its own error
	}
	return vals, s.peeked(gets, refs, vals)
}

// peekGets are the GETs of the peeks no kept copy served, and when they
// were queued.
type peekGets struct {
	at   []int // their indexes in the peeks
	cmds []*redis.StringCmd
	sent time.Time
}

// getPeeks serves refs from the kept copies into vals, and queues on pipe
// a GET of each of the others' entries.
func (s *Service) getPeeks(ctx context.Context, pipe redis.Pipeliner, refs []ref, vals []json.RawMessage) peekGets {
	g := peekGets{sent: time.Now()}
	for i, r := range refs {
		if v, ok := s.fixed.get(r); ok {
			s.m.Reads.WithLabelValues("near").Inc()
			vals[i] = v
			continue
		}
		g.at = append(g.at, i)
		g.cmds = append(g.cmds, pipe.Get(ctx, s.keys.Entry(r.part, r.key)))
	}
	return g
}

// peeked sets vals to the entries g read (nil for none), keeping the
// immutable mappings' ones.
func (s *Service) peeked(g peekGets, refs []ref, vals []json.RawMessage) error {
	for k, c := range g.cmds {
		v, err := c.Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return fmt.Errorf("session: read: %w", err)
		default:
			s.m.Reads.WithLabelValues("hit").Inc()
			i := g.at[k]
			vals[i] = json.RawMessage(v)
			s.fixed.put(refs[i], vals[i], g.sent)
		}
	}
	return nil
}

// readCall is one run of readScript for r with the I token tok, for a
// session that started at start and waits until deadline (ms on Redis's
// clock, or "+ms" from the script's own now).
func (s *Service) readCall(r ref, id, mode string, start int64, deadline any, tok string) rscript.Call {
	return rscript.Call{
		Script: readScript,
		Keys:   s.readKeys(r),
		Args:   []any{id, mode, s.cfg.LeaseLifetime.Milliseconds(), tok, start, deadline},
	}
}

// readKeys are readScript's keys for r: lease record, entry, mapping,
// wait queue.
func (s *Service) readKeys(r ref) []string {
	lk := s.keys.LeaseKey(r.part, r.key)
	return []string{lk.Lease, lk.Entry, s.keys.Mapping(r.part, r.key), lk.Wait}
}

// firstRead is a reply of readScript already obtained (ReadMany's shared
// round trip) and the I token it ran with.
type firstRead struct {
	reply []any
	tok   string
	// deadline, when not 0, is the wait deadline the run computed and
	// queued with (a session's first reads, in its begin's round trip).
	deadline int64
}

// readLeased runs readScript for r until it answers (waiting for leases,
// retrying refusals) and computes a miss; first, if not nil, is the reply
// of its first run.
func (s *Service) readLeased(ctx context.Context, r ref, id, mode string, wp waitPlan, first *firstRead) (json.RawMessage, error) {
	key := r.key
	lk := s.keys.LeaseKey(r.part, key)
	if first != nil && first.deadline != 0 {
		wp.deadline = first.deadline
	}
	w := lease.Waiter{ID: id, Start: wp.start, Deadline: wp.deadline}
	if mode != "" {
		w.Mode = lease.Mode(mode[0])
	}
	since, waits, refusals := time.Now(), 0, 0
	for {
		var woke <-chan struct{}
		if mode != "" {
			woke = s.wakes.watch(lk.Lease)
		}
		var (
			v   []any
			tok string
			err error
		)
		if first != nil {
			v, tok, first = first.reply, first.tok, nil
		} else {
			tok = newToken()
			c := s.readCall(r, id, mode, wp.start, wp.deadline, tok)
			v, err = c.Script.Run(ctx, s.rdb, c.Keys, c.Args...).Slice()
		}
		if err != nil {
			if waits > 0 {
				s.leave(ctx, lk, w)
			}
			return nil, fmt.Errorf("session: read: %w", err)
		}
		code, _ := v[0].(int64)
		if code >= 0 && waits > 0 {
			s.waited(ctx, id, wp, since, lk.Lease)
		}
		switch code {
		case -2: // queued: wait for a release, or poll
			if waits++; waits == 1 {
				conflict, _ := v[1].(string)
				s.base.LeaseConflicts.WithLabelValues(conflict).Inc()
			}
			if err := pause(ctx, woke, waits); err != nil {
				s.endWait(metrics.WaitCancelled, since)
				s.leave(ctx, lk, w)
				return nil, err
			}
			continue
		case -1, -3:
			conflict, _ := v[1].(string)
			s.base.LeaseConflicts.WithLabelValues(conflict).Inc()
			if refusals++; code == -1 && refusals < readAttempts {
				if err := sleep(ctx, lease.Backoff(time.Millisecond, s.cfg.LeaseLifetime/8, refusals)); err != nil {
					return nil, err
				}
				continue
			}
			s.m.Reads.WithLabelValues("conflict").Inc()
			if id != "" {
				s.abortQuietly(id, metrics.AbortConflict)
			}
			ae := &AbortedError{Reason: ReasonConflict, Conflict: lease.Conflict(conflict), Key: key}
			if code == -3 {
				s.endWait(metrics.WaitTimeout, since)
				ae.Waited = time.Since(since)
			}
			return nil, ae
		case 1:
			s.m.Reads.WithLabelValues("hit").Inc()
			val, _ := v[1].(string)
			return json.RawMessage(val), nil
		default:
			s.m.Reads.WithLabelValues("miss").Inc()
			seqText, _ := v[1].(string)
			mapped, _ := strconv.ParseInt(seqText, 10, 64)
			filler, _ := v[2].(int64)
			return s.miss(ctx, r, mapped, filler == 1, tok)
		}
	}
}

// miss computes a missing entry: the queue through the mapped session is
// applied first, so that the store holds every acknowledged session the
// value depends on; sessions committed since the miss voided the I lease
// if they change the key, so a value older than them is never installed.
//
// An entry that may lag its queue (mappings.Stale, by up to b) needs only
// the queue's sessions committed at least b/2 before the miss, whichever
// session changed it last; it is installed to expire b/2 after the miss
// began (or sooner, at its TTL), so that every read of it sees the
// sessions committed more than b before it.
func (s *Service) miss(ctx context.Context, r ref, mapped int64, filler bool, tok string) (json.RawMessage, error) {
	lk := []string{s.keys.Lease(r.part, r.key), s.keys.Entry(r.part, r.key)}
	giveBack := func() {
		if filler {
			_ = fillScript.Run(context.WithoutCancel(ctx), s.rdb, lk, tok, "", 0, "").Err()
		}
	}
	ttl, expireAt := jitter.TTL(mappings.TTL(r.mapping)), ""
	if b := mappings.Staleness(r.mapping); b > 0 {
		ttl = min(ttl, b/2)
		if r.queue != "" {
			now, through, err := s.horizon(ctx, r, b/2)
			if err != nil {
				giveBack()
				return nil, err
			}
			mapped, expireAt = through, strconv.FormatInt(now+ttl.Milliseconds(), 10)
		}
	}
	if mapped > 0 {
		if s.Applier == nil {
			giveBack()
			return nil, fmt.Errorf("session: %s has pending sessions and no applier runs here", r.key)
		}
		if err := s.Applier.ApplyThrough(ctx, r.queue, mapped); err != nil {
			giveBack()
			return nil, err
		}
	}
	val, err := r.mapping.Load(ctx, r.params)
	if err != nil {
		giveBack()
		return nil, fmt.Errorf("session: loading %q through its mapping: %w", truncate(r.key), err)
	}
	if val != nil {
		val, err = compactJSON(val)
		if err != nil {
			giveBack()
			return nil, fmt.Errorf("session: the mapping of %q returned invalid JSON: %w", truncate(r.key), err)
		}
	}
	if filler {
		text := ""
		if val != nil {
			text = string(val)
		}
		if err := fillScript.Run(ctx, s.rdb, lk, tok, text, ttl.Milliseconds(), expireAt).Err(); err != nil {
			return nil, fmt.Errorf("session: fill: %w", err)
		}
	}
	if val == nil {
		return nil, ErrNotFound
	}
	return val, nil
}

// horizon returns Redis's time (ms) and the last session of r's queue
// committed at least age before it (0 when none is that old).
func (s *Service) horizon(ctx context.Context, r ref, age time.Duration) (now, seq int64, err error) {
	v, err := horizonScript.Run(ctx, s.rdb, []string{s.keys.Queue(r.part, r.queue)}, age.Milliseconds()).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("session: reading queue %s's old sessions: %w", r.queue, err)
	}
	if len(v) != 2 {
		return 0, 0, fmt.Errorf("session: reading queue %s's old sessions: unexpected answer %v", r.queue, v)
	}
	return v[0], v[1], nil
}

func compactJSON(v json.RawMessage) (json.RawMessage, error) {
	if end, ok := jsonscan.ValueEnd(v, 0); ok && end == len(v) {
		return v, nil // valid and compact already (ValueEnd takes no spaces)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return nil, err
	}
	return json.RawMessage(b.Bytes()), nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// record returns the keys a session read and the lease mode of each, and
