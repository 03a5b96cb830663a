package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/writeback/writeback/internal/lease"
	"github.com/writeback/writeback/internal/rscript"
)

// MaxReadMany bounds the keys of one ReadMany.
const MaxReadMany = 1000

// ReadMany reads several mapped cache keys as Read reads each, in one
// session (id not empty: under S leases, X with forUpdate) or none. Every
// key is resolved first: a key that cannot be read (invalid, unmapped)
// refuses the whole request before any lease is taken. In a session the
// keys are noted in its record in one round trip and read in one more, a
// pipeline of readScript runs; outside one the cached entries are read in
// one pipeline of GETs (peek). Only the keys that need more — a miss, a
// lease to wait for or retry — go on alone, concurrently. A key with no
// value reads as nil. A lease not granted aborts the session, as in Read:
// the first such error is returned and the values are nil.
func (s *Service) ReadMany(ctx context.Context, id string, keys []string, forUpdate bool) ([]json.RawMessage, error) {
	return s.readMany(ctx, id, 0, keys, forUpdate)
}

// BeginRead begins a session and reads keys in it, as ReadMany, in the
// same round trips: the session's record is created by the step that
// notes the keys. It returns the session's id, which goes on as one begun
// by Begin; after an error other than an abort, the session may exist but
// is best left to time out (its leases expire).
func (s *Service) BeginRead(ctx context.Context, keys []string, forUpdate bool) (string, []json.RawMessage, error) {
	id := newID()
	vals, err := s.readMany(ctx, id, time.Now().UnixMicro(), keys, forUpdate)
	if err != nil {
		return "", nil, err
	}
	s.m.Begun.Inc()
	return id, vals, nil
}

// readMany is ReadMany, beginning session id at begin when begin is not 0.
func (s *Service) readMany(ctx context.Context, id string, begin int64, keys []string, forUpdate bool) ([]json.RawMessage, error) {
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
		if wp, err = s.note(ctx, id, begin, mode, uniq...); err != nil {
			return nil, err
		}
	} else if forUpdate {
		return nil, invalid("lease=x needs a session; begin one with POST /v1/sessions")
	}

	// The first round: a key's value, or what its first readScript run
	// answered when it needs more (nil outside a session: a miss, read
	// afresh).
	vals := make([]json.RawMessage, len(refs))
	firsts := make([]*firstRead, len(refs))
	if id == "" {
		var err error
		if vals, err = s.peek(ctx, refs); err != nil {
			return nil, err
		}
	} else if err := s.readFirst(ctx, refs, id, mode, wp, vals, firsts); err != nil {
		return nil, err
	}

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for i, r := range refs {
		if vals[i] != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			val, err := s.readLeased(ctx, r, id, mode, wp, firsts[i])
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

// readFirst runs readScript once for every ref, in one pipeline: a hit
// sets vals[i]; any other answer (a miss, a lease to wait for or retry)
// sets firsts[i], for readLeased to go on from.
func (s *Service) readFirst(ctx context.Context, refs []ref, id, mode string, wp waitPlan, vals []json.RawMessage, firsts []*firstRead) error {
	calls := make([]rscript.Call, len(refs))
	toks := make([]string, len(refs))
	for i, r := range refs {
		toks[i] = newToken()
		calls[i] = s.readCall(r, id, mode, wp, toks[i])
	}
	replies, errs, _ := rscript.Durable{Client: s.rdb}.RunAll(ctx, calls)
	for i := range refs {
		if errs[i] != nil {
			return fmt.Errorf("session: read: %w", errs[i])
		}
		v, ok := replies[i].([]any)
		if !ok || len(v) < 2 {
			return fmt.Errorf("session: read: unexpected reply %v", replies[i])
		}
		if code, _ := v[0].(int64); code == 1 {
			s.m.Reads.WithLabelValues("hit").Inc()
			val, _ := v[1].(string)
			vals[i] = json.RawMessage(val)
			continue
		}
		firsts[i] = &firstRead{reply: v, tok: toks[i]}
	}
	return nil
}
