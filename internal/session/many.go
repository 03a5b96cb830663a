package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/lease"
	"github.com/writeback/writeback/internal/rscript"
)

// MaxReadMany bounds the keys of one ReadMany (leased and peeked
// together).
const MaxReadMany = 1000

// Reads is one multi-read: Keys in the session under its leases (S, X
// with ForUpdate), Peek as a read outside any session reads them (no
// lease: the latest committed value), in the same round trips. A
// transaction reads in one request both the entries it must hold still
// and the ones no transaction changes.
type Reads struct {
	Keys      []string
	Peek      []string
	ForUpdate bool
}

// ReadMany reads several mapped cache keys as Read reads each, in one
// session (id not empty: under S leases, X with forUpdate) or none; see
// ReadAll.
func (s *Service) ReadMany(ctx context.Context, id string, keys []string, forUpdate bool) ([]json.RawMessage, error) {
	vals, _, err := s.readMany(ctx, id, 0, Reads{Keys: keys, ForUpdate: forUpdate})
	return vals, err
}

// ReadAll reads r.Keys in session id (under S leases, X with
// r.ForUpdate; without a session, none) and r.Peek without leases. Every
// key is resolved first: a key that cannot be read (invalid, unmapped)
// refuses the whole request before any lease is taken. In a session the
// keys are noted in its record in one round trip and read in one more, a
// pipeline of readAllScript runs (one per partition) and the peeks' GETs;
// outside one every entry is read in one pipeline of GETs (peek). Only the
// keys that need more — a miss, a lease to wait for or retry — go on
// alone, concurrently. A key with no value reads as nil. A lease not granted aborts the session, as
// in Read: the first such error is returned and the values are nil.
func (s *Service) ReadAll(ctx context.Context, id string, r Reads) (vals, peeked []json.RawMessage, err error) {
	return s.readMany(ctx, id, 0, r)
}

// BeginRead begins a session and reads keys in it, as ReadMany; see
// BeginReadAll.
func (s *Service) BeginRead(ctx context.Context, keys []string, forUpdate bool) (string, []json.RawMessage, error) {
	id, vals, _, err := s.BeginReadAll(ctx, Reads{Keys: keys, ForUpdate: forUpdate})
	return id, vals, err
}

// BeginReadAll begins a session and reads r in it, as ReadAll, in one
// round trip: the step that creates the session's record and notes the
// keys, the lease requests and the peeks go in one pipeline, in that
// order. It returns the session's id, which goes on as one begun by Begin;
// after an error other than an abort, the session may exist but is best
// left to time out (its leases expire).
func (s *Service) BeginReadAll(ctx context.Context, r Reads) (id string, vals, peeked []json.RawMessage, err error) {
	id = newID()
	vals, peeked, err = s.readMany(ctx, id, time.Now().UnixMicro(), r)
	if err != nil {
		return "", nil, nil, err
	}
	s.m.Begun.Inc()
	return id, vals, peeked, nil
}

// readMany is ReadAll, beginning session id at begin when begin is not 0.
func (s *Service) readMany(ctx context.Context, id string, begin int64, rd Reads) (vals, peeked []json.RawMessage, err error) {
	if n := len(rd.Keys) + len(rd.Peek); n == 0 || n > MaxReadMany {
		return nil, nil, invalid("a multi-read names 1 to %d keys, not %d", MaxReadMany, n)
	}
	refs, at, err := s.resolveAll(rd.Keys)
	if err != nil {
		return nil, nil, err
	}
	prefs, pat, err := s.resolveAll(rd.Peek)
	if err != nil {
		return nil, nil, err
	}
	mode := ""
	if id != "" {
		if !validID(id) {
			return nil, nil, ErrUnknownSession
		}
		mode = string(lease.Shared)
		if rd.ForUpdate {
			mode = string(lease.Exclusive)
		}
	} else if rd.ForUpdate {
		return nil, nil, invalid("lease=x needs a session; begin one with POST /v1/sessions")
	}

	// The first round: a key's value, or what its first readScript run
	// answered when it needs more (nil outside a session: a miss, read
	// afresh).
	vals, pvals := make([]json.RawMessage, len(refs)), make([]json.RawMessage, len(prefs))
	firsts := make([]*firstRead, len(refs))
	var wp waitPlan
	if id == "" {
		all, err := s.peek(ctx, append(refs[:len(refs):len(refs)], prefs...))
		if err != nil {
			return nil, nil, err
		}
		copy(vals, all)
		copy(pvals, all[len(refs):])
	} else if wp, err = s.readFirst(ctx, id, begin, mode, refs, prefs, vals, firsts, pvals); err != nil {
		s.known.forget(id)
		return nil, nil, err
	}

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	more := func(r ref, id, mode string, first *firstRead, into *json.RawMessage) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			val, err := s.readLeased(ctx, r, id, mode, wp, first)
			if err != nil && !errors.Is(err, ErrNotFound) {
				mu.Lock()
				defer mu.Unlock()
				// An abort explains the other keys' failures (the session
				// is gone).
				var ae *AbortedError
				if firstErr == nil || (errors.As(err, &ae) && !errors.As(firstErr, &ae)) {
					firstErr = err
				}
				return
			}
			if mode == "" {
				s.fixed.put(r, val, sent)
			}
			*into = val
		}()
	}
	for i, r := range refs {
		if vals[i] == nil {
			more(r, id, mode, firsts[i], &vals[i])
		}
	}
	for i, r := range prefs {
		if pvals[i] == nil {
			more(r, "", "", nil, &pvals[i])
		}
	}
	wg.Wait()
	if firstErr != nil {
		if id != "" {
			s.known.forget(id)
		}
		return nil, nil, firstErr
	}
	if id != "" {
		s.known.read(id, refs, vals)
	}
	return spread(rd.Keys, at, vals), spread(rd.Peek, pat, pvals), nil
}

// resolveAll resolves keys, once each: refs in first-seen order, and at,
// each key's index in refs.
func (s *Service) resolveAll(keys []string) (refs []ref, at map[string]int, err error) {
	refs = make([]ref, 0, len(keys))
	at = make(map[string]int, len(keys))
	for _, k := range keys {
		if _, ok := at[k]; ok {
			continue
		}
		r, err := s.resolve(k)
		if err != nil {
			return nil, nil, err
		}
		at[k] = len(refs)
		refs = append(refs, r)
	}
	return refs, at, nil
}

// spread returns the value of each of keys from vals, indexed by at.
func spread(keys []string, at map[string]int, vals []json.RawMessage) []json.RawMessage {
	if keys == nil {
		return nil
	}
	out := make([]json.RawMessage, len(keys))
	for i, k := range keys {
		out[i] = vals[at[k]]
	}
	return out
}

// maxReadAll bounds the keys of one readAllScript run, and so how long
// one multi-read holds Redis.
const maxReadAll = 64

// readGroup is one readAllScript run of readFirst: the refs it reads, in
// order, and its command.
type readGroup struct {
	refs []int
	cmd  *redis.Cmd
}

// readFirst notes refs in session id's record, runs readScript's step once
// for every ref (readAllScript, a run per partition) and GETs the entries
// of prefs: a hit sets vals[i] (pvals[i]); any other answer (a miss, a
// lease to wait for or retry) sets firsts[i], for readLeased to go on
// from. A session that begins here (begin not 0) does all of it in one
// pipeline, the step that creates its record first; otherwise the note
// goes first, as the reads wait until the deadline it answers, and the
// rest in one pipeline. It returns the session's wait plan.
func (s *Service) readFirst(ctx context.Context, id string, begin int64, mode string, refs, prefs []ref, vals []json.RawMessage, firsts []*firstRead, pvals []json.RawMessage) (waitPlan, error) {
	keys := make([]string, len(refs))
	for i, r := range refs {
		keys[i] = r.key
	}
	var wp waitPlan
	var deadline any // the reads' wait deadline: absolute, or "+ms" from their own now
	if begin == 0 {
		var err error
		if wp, err = s.note(ctx, id, 0, mode, keys...); err != nil {
			return wp, err
		}
		s.known.noted(id, wp.start, wp.notes, mode, keys, s.cfg.SessionTimeout)
		deadline = wp.deadline
	} else {
		// A new session's first leases wait the lease wait from now
		// (recordScript's answer for them): each read computes it from its
		// own clock and says which it used.
		deadline = "+" + strconv.FormatInt(s.cfg.LeaseWait.Milliseconds(), 10)
		wp = waitPlan{start: begin, first: true}
	}
	pipe := s.rdb.Pipeline()
	var rec *redis.Cmd
	if begin != 0 {
		rec = recordScript.EvalSha(ctx, pipe, []string{s.keys.Record(id)}, s.noteArgs(begin, mode, keys)...)
	}
	// One readAllScript run per partition (up to maxReadAll keys).
	toks := make([]string, len(refs))
	var groups []*readGroup
	open := map[int]*readGroup{}
	for i, r := range refs {
		toks[i] = newToken()
		g := open[r.part]
		if g == nil || len(g.refs) == maxReadAll {
			g = &readGroup{}
			open[r.part] = g
			groups = append(groups, g)
		}
		g.refs = append(g.refs, i)
	}
	call := func(g *readGroup, start int64, deadline any) rscript.Call {
		keys := make([]string, 0, 4*len(g.refs))
		args := make([]any, 0, 5+len(g.refs))
		args = append(args, id, mode, s.cfg.LeaseLifetime.Milliseconds(), start, deadline)
		for _, i := range g.refs {
			keys = append(keys, s.readKeys(refs[i])...)
			args = append(args, toks[i])
		}
		return rscript.Call{Script: readAllScript, Keys: keys, Args: args}
	}
	cmds := make([]*redis.Cmd, len(groups))
	for j, g := range groups {
		c := call(g, wp.start, deadline)
		cmds[j] = c.Script.EvalSha(ctx, pipe, c.Keys, c.Args...)
	}
	gets := s.getPeeks(ctx, pipe, prefs, pvals)
	_, _ = pipe.Exec(ctx) // each command carries its own error

	replies := make([]any, len(groups))
	errs := make([]error, len(groups))
	for j, c := range cmds {
		replies[j], errs[j] = c.Result()
	}
	rerun := make([]bool, len(groups)) // groups to run again
	for j, err := range errs {
		rerun[j] = rscript.IsNoScript(err)
	}
	if rec != nil {
		v, err := rec.Result()
		if rscript.IsNoScript(err) {
			// Redis lost its scripts (a restart): create the record now.
			// The reads that ran stand (a lease taken just before its
			// record is noted expires like any other); those that found
			// their script gone run again below.
			if err := recordScript.Load(ctx, s.rdb).Err(); err != nil {
				return wp, fmt.Errorf("session: %w", err)
			}
			if wp, err = s.note(ctx, id, begin, mode, keys...); err != nil {
				return wp, err
			}
		} else if wp, err = notePlan(v, err); err != nil {
			return wp, err
		}
		s.known.noted(id, wp.start, wp.notes, mode, keys, s.cfg.SessionTimeout)
		deadline = wp.deadline
	}
	var again []rscript.Call
	for j, g := range groups {
		if rerun[j] {
			again = append(again, call(g, wp.start, deadline))
		}
	}
	if len(again) > 0 {
		// Durable loads the scripts Redis lost and runs them again.
		rs, es, _ := rscript.Durable{Client: s.rdb}.RunAll(ctx, again)
		for j := range groups {
			if rerun[j] {
				replies[j], errs[j], rs, es = rs[0], es[0], rs[1:], es[1:]
			}
		}
	}
	for j, g := range groups {
		if errs[j] != nil {
			return wp, fmt.Errorf("session: read: %w", errs[j])
		}
		all, ok := replies[j].([]any)
		if !ok || len(all) != len(g.refs) {
			return wp, fmt.Errorf("session: read: unexpected reply %v", replies[j])
		}
		for k, i := range g.refs {
			v, ok := all[k].([]any)
			if !ok || len(v) < 2 {
				return wp, fmt.Errorf("session: read: unexpected reply %v", all[k])
			}
			if code, _ := v[0].(int64); code == 1 {
				s.m.Reads.WithLabelValues("hit").Inc()
				val, _ := v[1].(string)
				vals[i] = json.RawMessage(val)
				continue
			}
			firsts[i] = &firstRead{reply: v, tok: toks[i]}
			if code, _ := v[0].(int64); (code == -2 || code == -3) && len(v) > 2 {
				// The deadline this read queued with: its later runs and
				// its leaving name the same waiter.
				firsts[i].deadline, _ = v[2].(int64)
			}
		}
	}
	return wp, s.peeked(gets, prefs, pvals)
}
