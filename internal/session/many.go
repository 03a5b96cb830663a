package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/writeback/writeback/internal/lease"
	"github.com/writeback/writeback/internal/rscript"
)

// MaxReadMany bounds the keys of one ReadMany.
const MaxReadMany = 1000

// miss marks, among ReadMany's first replies, a key that peek did not find:
// it is read afresh (not a code of readScript's).
const miss = -100

// ReadMany reads several mapped cache keys as Read reads each, in one
// session (id not empty: under S leases, X with forUpdate) or none. Every
// key is resolved first: a key that cannot be read (invalid, unmapped)
// refuses the whole request before any lease is taken. The keys are noted
// in the session's record in one round trip and read in one more, a
// pipeline of readScript runs; only the keys that need more — a miss, a
// lease to wait for or retry — go on alone, concurrently. A key with no
// value reads as nil. A lease not granted aborts the session, as in Read:
// the first such error is returned and the values are nil.
func (s *Service) ReadMany(ctx context.Context, id string, keys []string, forUpdate bool) ([]json.RawMessage, error) {
	if len(keys) == 0 || len(keys) > MaxReadMany {
		return nil, invalid("a multi-read names 1 to %d keys, not %d", MaxReadMany, len(keys))
	}
	refs := make([]ref, 0, len(keys))
	at := make(map[string]int, len(keys)) // key -> index in refs
	for _, k := range keys {
		if _, ok := at[k]; ok {
			continue
		}
		r, err := s.resolve(k)
		if err != nil {
			return nil, err
		}
		at[k] = len(refs)
		refs = append(refs, r)
	}
	mode := ""
	var wp waitPlan
	if id != "" {
		if !validID(id) {
			return nil, ErrUnknownSession
		}
		mode = string(lease.Shared)
		if forUpdate {
			mode = string(lease.Exclusive)
		}
		uniq := make([]string, len(refs))
		for i, r := range refs {
			uniq[i] = r.key
		}
		var err error
		if wp, err = s.note(ctx, id, mode, uniq...); err != nil {
			return nil, err
		}
	} else if forUpdate {
		return nil, invalid("lease=x needs a session; begin one with POST /v1/sessions")
	}

	var (
		vals    []json.RawMessage
		replies []any
		errs    []error
		toks    = make([]string, len(refs))
	)
	if id == "" {
		// Outside a session: the cached entries in one round trip of GETs,
		// then the misses each through readScript, concurrently.
		var err error
		if vals, err = s.peek(ctx, refs); err != nil {
			return nil, err
		}
		replies, errs = make([]any, len(refs)), make([]error, len(refs))
		for i, v := range vals {
			if v != nil {
				replies[i] = []any{int64(1), string(v)}
			} else {
				replies[i] = []any{int64(miss), ""}
			}
		}
	} else {
		calls := make([]rscript.Call, len(refs))
		for i, r := range refs {
			toks[i] = newToken()
			calls[i] = s.readCall(r, id, mode, wp, toks[i])
		}
		replies, errs, _ = rscript.Durable{Client: s.rdb}.RunAll(ctx, calls)
		vals = make([]json.RawMessage, len(refs))
	}

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		// An abort explains the other keys' failures (the session is gone).
		var ae *AbortedError
		if firstErr == nil || (errors.As(err, &ae) && !errors.As(firstErr, &ae)) {
			firstErr = err
		}
	}
	for i, r := range refs {
		if errs[i] != nil {
			fail(fmt.Errorf("session: read: %w", errs[i]))
			continue
		}
		v, ok := replies[i].([]any)
		if !ok || len(v) < 2 {
			fail(fmt.Errorf("session: read: unexpected reply %v", replies[i]))
			continue
		}
		code, _ := v[0].(int64)
		if code == 1 {
			if id != "" { // peek counted its own
				s.m.Reads.WithLabelValues("hit").Inc()
			}
			val, _ := v[1].(string)
			vals[i] = json.RawMessage(val)
			continue
		}
		var fr *firstRead // nil: peek's miss, read afresh
		if code != miss {
			fr = &firstRead{reply: v, tok: toks[i]}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			val, err := s.readLeased(ctx, r, id, mode, wp, fr)
			if err != nil && !errors.Is(err, ErrNotFound) {
				fail(err)
				return
			}
			vals[i] = val
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	out := make([]json.RawMessage, len(keys))
	for i, k := range keys {
		out[i] = vals[at[k]]
	}
	return out, nil
}
