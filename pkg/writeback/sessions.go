package writeback

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/writeback/writeback/internal/api"
	"github.com/writeback/writeback/internal/jsonenc"
	"github.com/writeback/writeback/internal/session"
	"github.com/writeback/writeback/internal/store"
	"github.com/writeback/writeback/pkg/client"
)

// Sessions is the sessions API (Design 2: mapped cache reads under leases,
// commits of statements and cache changes into a queue) that both the
// HTTP client (*client.Client) and the embedded mode (*DB) offer: an
// application written against it switches between the two by
// construction. Its errors are *client.Error on both; client.IsAborted
// says a session is over and must start again.
type Sessions interface {
	BeginSession(ctx context.Context) (string, error)
	Cache(ctx context.Context, key, session string, forUpdate bool) (json.RawMessage, error)
	CacheMany(ctx context.Context, keys []string, session string, forUpdate bool) ([]json.RawMessage, error)
	BeginCacheMany(ctx context.Context, keys []string, forUpdate bool) (string, []json.RawMessage, error)
	ReadCache(ctx context.Context, session string, r client.Reads) (client.CacheManyResult, error)
	ValidateSession(ctx context.Context, session string) error
	CommitSession(ctx context.Context, session string, commit client.Commit) (client.CommitResult, error)
	AbortSession(ctx context.Context, session string) error
}

var (
	_ Sessions = (*client.Client)(nil)
	_ Sessions = (*DB)(nil)
)

// sessionCall admits a session call unless the DB is closed and bounds it
// as the HTTP API bounds a request (api.RequestTimeout): the caller runs
// done when it returns.
func (db *DB) sessionCall(ctx context.Context) (_ context.Context, done func(), ok bool) {
	if !db.enter() {
		return nil, nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, api.RequestTimeout)
	return ctx, func() { cancel(); db.mu.RUnlock() }, true
}

// BeginSession starts a session and returns its id.
func (db *DB) BeginSession(ctx context.Context) (string, error) {
	ctx, done, ok := db.sessionCall(ctx)
	if !ok {
		return "", ErrClosed
	}
	defer done()
	id, err := db.sessions.Service().Begin(ctx)
	if err != nil {
		return "", db.sessionFail(err)
	}
	return id, nil
}

// Cache reads a mapped cache entry; in a session (session not empty) under
// an S lease, or an X lease with forUpdate. A missing value is an error for
// which client.IsNotFound is true.
func (db *DB) Cache(ctx context.Context, key, session string, forUpdate bool) (json.RawMessage, error) {
	ctx, done, ok := db.sessionCall(ctx)
	if !ok {
		return nil, ErrClosed
	}
	defer done()
	v, err := db.sessions.Service().Read(ctx, session, key, forUpdate)
	if err != nil {
		return nil, db.sessionFail(err)
	}
	return v, nil
}

// CacheMany reads several mapped cache entries, as Cache reads each, in
// one Redis round trip for the leases and the entries found: values[i] is
// keys[i]'s value, nil when it has none. An unmapped key refuses the whole
// read. As over HTTP, session "new" begins a session (whose id only
// BeginCacheMany returns).
func (db *DB) CacheMany(ctx context.Context, keys []string, session string, forUpdate bool) ([]json.RawMessage, error) {
	res, err := db.ReadCache(ctx, session, client.Reads{Keys: keys, ForUpdate: forUpdate})
	return res.Values, err
}

// BeginCacheMany begins a session and reads keys in it (under S leases, X
// with forUpdate), as BeginSession then CacheMany would: it returns the
// session, to go on with, and the values.
func (db *DB) BeginCacheMany(ctx context.Context, keys []string, forUpdate bool) (string, []json.RawMessage, error) {
	res, err := db.ReadCache(ctx, "new", client.Reads{Keys: keys, ForUpdate: forUpdate})
	return res.Session, res.Values, err
}

// ReadCache reads r as over HTTP: r.Keys in session sid (under its leases; ""
// none; "new" begins one, whose id the result carries) and r.Peek without
// leases, in one Redis round trip for a session that begins here and for
// none, two for one that exists (its record first), besides misses and
// waits. An empty read is refused as the HTTP API refuses it.
func (db *DB) ReadCache(ctx context.Context, sid string, r client.Reads) (client.CacheManyResult, error) {
	if len(r.Keys)+len(r.Peek) == 0 {
		return client.CacheManyResult{}, invalid("name the keys to read: a multi-read of no key reads nothing")
	}
	ctx, done, ok := db.sessionCall(ctx)
	if !ok {
		return client.CacheManyResult{}, ErrClosed
	}
	defer done()
	rd := session.Reads{Keys: r.Keys, Peek: r.Peek, ForUpdate: r.ForUpdate}
	var res client.CacheManyResult
	var err error
	if sid == "new" {
		res.Session, res.Values, res.Peeked, err = db.sessions.Service().BeginReadAll(ctx, rd)
	} else {
		res.Values, res.Peeked, err = db.sessions.Service().ReadAll(ctx, sid, rd)
	}
	if err != nil {
		return client.CacheManyResult{}, db.sessionFail(err)
	}
	if res.Values == nil {
		res.Values = []json.RawMessage{}
	}
	return res, nil
}

// ValidateSession makes the session's S leases golden: no writer can void
// them until it commits, aborts or they expire.
func (db *DB) ValidateSession(ctx context.Context, session string) error {
	return db.sessionAct(ctx, session, db.sessions.Service().Validate)
}

// CommitSession commits a session; once it returns, the session is durable
// in Redis and will be applied to the store in its queue's order. The
// statements' arguments are encoded as JSON, as the HTTP client sends
// them, so that the service sees the request a sidecar would.
func (db *DB) CommitSession(ctx context.Context, session string, commit client.Commit) (client.CommitResult, error) {
	req, err := commitRequest(commit)
	if err != nil {
		return client.CommitResult{}, err
	}
	ctx, done, ok := db.sessionCall(ctx)
	if !ok {
		return client.CommitResult{}, ErrClosed
	}
	defer done()
	res, err := db.sessions.Service().Commit(ctx, session, req)
	if err != nil {
		return client.CommitResult{}, db.sessionFail(err)
	}
	return client.CommitResult{Session: res.Session, Queue: res.Queue, Seq: res.Seq}, nil
}

// AbortSession releases a session's leases.
func (db *DB) AbortSession(ctx context.Context, session string) error {
	return db.sessionAct(ctx, session, db.sessions.Service().Abort)
}

// sessionAct runs a call on one session that answers nothing but an error.
func (db *DB) sessionAct(ctx context.Context, session string, act func(context.Context, string) error) error {
	ctx, done, ok := db.sessionCall(ctx)
	if !ok {
		return ErrClosed
	}
	defer done()
	if err := act(ctx, session); err != nil {
		return db.sessionFail(err)
	}
	return nil
}

// commitRequest is the service's request for c: what the HTTP API decodes
// from the body the HTTP client encodes for c. Every argument, patch and
// value is encoded by encoding/json as the client encodes the whole body
// (a json.RawMessage compacted, a []byte as base64); an absent patch or
// value (nil) stays absent.
func commitRequest(c client.Commit) (session.CommitRequest, error) {
	req := session.CommitRequest{Queue: c.Queue, Affects: slices.Clone(c.Affects)}
	if len(c.Statements) > 0 {
		req.Statements = make([]store.Statement, len(c.Statements))
	}
	// Every argument is encoded into one buffer (jsonenc: json.Marshal's
	// bytes), and sliced from it once it is whole.
	var buf []byte
	var ends []int // where each argument ends in buf, in order
	for i, st := range c.Statements {
		req.Statements[i].SQL = st.SQL
		for j, a := range st.Args {
			var err error
			if buf, err = jsonenc.Value(buf, a); err != nil {
				return session.CommitRequest{}, invalid(fmt.Sprintf("argument %d of statement %d cannot be encoded as JSON: %v", j+1, i+1, err))
			}
			ends = append(ends, len(buf))
		}
	}
	start := 0
	for i, st := range c.Statements {
		if len(st.Args) == 0 {
			continue
		}
		args := make([]json.RawMessage, len(st.Args))
		for j := range args {
			args[j] = json.RawMessage(buf[start:ends[0]:ends[0]])
			start, ends = ends[0], ends[1:]
		}
		req.Statements[i].Args = args
	}
	if len(c.Cache) > 0 {
		req.Cache = make([]session.CacheChange, len(c.Cache))
	}
	for i, ch := range c.Cache {
		cc := session.CacheChange{Key: ch.Key, Delete: ch.Delete}
		var err error
		if cc.Patch, err = encodeChange(ch.Patch); err != nil {
			return session.CommitRequest{}, invalid(fmt.Sprintf("the patch of cache change %d cannot be encoded as JSON: %v", i+1, err))
		}
		if cc.Set, err = encodeChange(ch.Set); err != nil {
			return session.CommitRequest{}, invalid(fmt.Sprintf("the value of cache change %d cannot be encoded as JSON: %v", i+1, err))
		}
		req.Cache[i] = cc
	}
	return req, nil
}

// encodeChange encodes a cache change's patch or value as json.Marshal
// does (jsonenc); nil (left out of the HTTP body by omitempty) stays nil.
func encodeChange(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	return jsonenc.Value(nil, v)
}

// sessionFail turns a session service error into the HTTP API's answer
// (api.SessionFailure), as a *client.Error whose Cause is err, and logs
// what the API would log.
func (db *DB) sessionFail(err error) error {
	return db.answer(api.SessionFailure(err), err)
}
