package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Sessions (Design 2): a session reads mapped cache entries under S leases,
// then commits SQL statements, cache changes and the keys it affects into
// a queue, all or nothing. A 409 (IsAborted) means the session is over:
// begin a new one and start again, after Error.RetryAfter.

// Statement is one parameterised DML statement of a session, placeholders
// in the store's own style ($1 for PostgreSQL, ? for MySQL).
type Statement struct {
	SQL  string `json:"sql"`
	Args []any  `json:"args,omitempty"`
}

// CacheChange changes one mapped cache entry: exactly one of Patch (update
// operators such as {"$inc":{"balance":-5}}), Set (the whole value) and
// Delete.
type CacheChange struct {
	Key    string `json:"key"`
	Patch  any    `json:"patch,omitempty"`
	Set    any    `json:"set,omitempty"`
	Delete bool   `json:"delete,omitempty"`
}

// Commit is the body of POST /v1/sessions/{id}/commit.
type Commit struct {
	Queue      string        `json:"queue,omitempty"`
	Statements []Statement   `json:"statements,omitempty"`
	Cache      []CacheChange `json:"cache,omitempty"`
	Affects    []string      `json:"affects,omitempty"`
}

// CommitResult is the answer of a commit.
type CommitResult struct {
	Session string `json:"session"`
	Queue   string `json:"queue,omitempty"`
	Seq     int64  `json:"seq,omitempty"` // the session's position in its queue
}

// SessionStarted is the answer of POST /v1/sessions.
type SessionStarted struct {
	Session string `json:"session"`
}

// QueueStatus is the answer of GET /v1/queues.
type QueueStatus struct {
	PendingSessions         int64             `json:"pendingSessions"`
	PinnedBytes             int64             `json:"pinnedBytes"`
	OldestPendingAgeSeconds float64           `json:"oldestPendingAgeSeconds"`
	Queues                  int64             `json:"queues"` // queues with pending sessions
	StoppedQueues           int64             `json:"stoppedQueues"`
	DeadLetters             []QueueDeadLetter `json:"deadLetters"`
	Partitions              int               `json:"partitions"`
	OwnedPartitions         []int             `json:"ownedPartitions"`
	Families                []QueueFamily     `json:"families"`
}

// QueueFamily is one configured family of queues.
type QueueFamily struct {
	Name   string   `json:"name"`
	Store  string   `json:"store"`
	Tables []string `json:"tables"`
}

// QueueDeadLetter is a session the store rejected for good; its queue is
// stopped until the session is replayed or dropped.
type QueueDeadLetter struct {
	Queue      string          `json:"queue"`
	Session    string          `json:"session"`
	Seq        int64           `json:"seq"`
	Error      string          `json:"error"`
	At         time.Time       `json:"at"`
	Statements json.RawMessage `json:"statements"`
	Affects    []string        `json:"affects,omitempty"`
}

// QueueAction selects stopped queues: one Queue, or All.
type QueueAction struct {
	Queue string `json:"queue,omitempty"`
	All   bool   `json:"all,omitempty"`
}

// QueueFlushResult is the answer of POST /v1/queues/flush.
type QueueFlushResult struct {
	Applied int64 `json:"applied"`
	Pending int64 `json:"pending"`
	Stopped int64 `json:"stopped"`
	Drained bool  `json:"drained"` // nothing pending except behind dead letters
}

// BeginSession starts a session and returns its id.
func (c *Client) BeginSession(ctx context.Context) (string, error) {
	var res SessionStarted
	err := c.doJSON(ctx, http.MethodPost, "/v1/sessions", nil, &res)
	return res.Session, err
}

// CacheMany reads several mapped cache entries in one request, as Cache
// reads each (one Redis round trip for the leases and the entries found):
// values[i] is keys[i]'s value, nil when it has none. An unmapped key
// refuses the whole request.
func (c *Client) CacheMany(ctx context.Context, keys []string, session string, forUpdate bool) ([]json.RawMessage, error) {
	res, err := c.ReadCache(ctx, session, Reads{Keys: keys, ForUpdate: forUpdate})
	return res.Values, err
}

// BeginCacheMany begins a session and reads keys in it (under S leases, X
// with forUpdate) in one request, as BeginSession then CacheMany would in
// two: it returns the session, to go on with, and the values.
func (c *Client) BeginCacheMany(ctx context.Context, keys []string, forUpdate bool) (string, []json.RawMessage, error) {
	res, err := c.ReadCache(ctx, "new", Reads{Keys: keys, ForUpdate: forUpdate})
	return res.Session, res.Values, err
}

// ReadCache reads r in one request: r.Keys in session (under its leases;
// "" none; "new" begins one, whose id the result carries) and r.Peek
// without leases. Values[i] is r.Keys[i]'s value and Peeked[j]
// r.Peek[j]'s, nil when it has none. An unmapped key refuses the whole
// request. With WithImmutableCache, what the client's kept copies hold is
// served from them and only the rest is asked for; nothing is, when they
// hold it all and there is no session to begin.
func (c *Client) ReadCache(ctx context.Context, session string, r Reads) (CacheManyResult, error) {
	if c.kept == nil {
		return c.readCache(ctx, session, r)
	}
	sent := time.Now()
	rest, vals, peeked, keyAt, peekAt := fromKept(c.kept, session, r)
	if len(rest.Keys)+len(rest.Peek) == 0 {
		if session == "" {
			return CacheManyResult{Values: vals, Peeked: peeked}, nil
		}
		rest, keyAt, peekAt = r, nil, nil // a session to begin: ask for it all
	}
	res, err := c.readCache(ctx, session, rest)
	if err != nil {
		return CacheManyResult{}, err
	}
	if keyAt == nil && peekAt == nil {
		return res, nil
	}
	for i, at := range keyAt {
		vals[at] = res.Values[i]
	}
	for i, at := range peekAt {
		peeked[at] = res.Peeked[i]
	}
	for _, read := range []struct {
		keys []string
		vals []json.RawMessage
	}{{rest.Keys, res.Values}, {rest.Peek, res.Peeked}} {
		for i, key := range read.keys {
			if ms := res.Keep[key]; ms > 0 && i < len(read.vals) {
				c.kept.Put(key, read.vals[i], sent.Add(time.Duration(ms)*time.Millisecond))
			}
		}
	}
	return CacheManyResult{Session: res.Session, Values: vals, Peeked: peeked, Keep: res.Keep}, nil
}

// readCache sends r.
func (c *Client) readCache(ctx context.Context, session string, r Reads) (CacheManyResult, error) {
	q := url.Values{}
	for _, k := range r.Keys {
		q.Add("key", k)
	}
	for _, k := range r.Peek {
		q.Add("peek", k)
	}
	if session != "" {
		q.Set("session", session)
	}
	if r.ForUpdate {
		q.Set("lease", "x")
	}
	var res CacheManyResult
	if err := c.doJSON(ctx, http.MethodGet, "/v1/cache?"+q.Encode(), nil, &res); err != nil {
		return CacheManyResult{}, err
	}
	if len(res.Values) != len(r.Keys) || len(res.Peeked) != len(r.Peek) {
		return CacheManyResult{}, fmt.Errorf("client: GET /v1/cache: %d values and %d peeked for %d keys and %d peeks", len(res.Values), len(res.Peeked), len(r.Keys), len(r.Peek))
	}
	for _, vals := range [][]json.RawMessage{res.Values, res.Peeked} {
		for i, v := range vals {
			if string(v) == "null" {
				vals[i] = nil
			}
		}
	}
	return res, nil
}

// Cache reads a mapped cache entry; in a session (session not empty) under
// an S lease, or an X lease with forUpdate. A missing value is an error for
// which IsNotFound is true.
func (c *Client) Cache(ctx context.Context, key, session string, forUpdate bool) (json.RawMessage, error) {
	q := url.Values{}
	if session != "" {
		q.Set("session", session)
	}
	if forUpdate {
		q.Set("lease", "x")
	}
	p := "/v1/cache/" + url.PathEscape(key)
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	a, err := c.do(ctx, &request{method: http.MethodGet, url: c.base + p})
	if err != nil {
		return nil, err
	}
	return json.RawMessage(a.body), nil
}

// ValidateSession makes the session's S leases golden: no writer can void
// them until it commits, aborts or they expire.
func (c *Client) ValidateSession(ctx context.Context, session string) error {
	var res SessionStarted
	return c.doJSON(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(session)+"/validate", nil, &res)
}

// CommitSession commits a session; once it returns, the session is
// durable in Redis and will be applied to the store in its queue's order.
func (c *Client) CommitSession(ctx context.Context, session string, commit Commit) (CommitResult, error) {
	body, err := encodeCommit(commit)
	if err != nil {
		return CommitResult{}, err
	}
	var res CommitResult
	err = c.doJSON(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(session)+"/commit", body, &res)
	return res, err
}

// AbortSession releases a session's leases.
func (c *Client) AbortSession(ctx context.Context, session string) error {
	var res SessionStarted
	return c.doJSON(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(session)+"/abort", nil, &res)
}

// Queues returns the state of the session queues.
func (c *Client) Queues(ctx context.Context) (QueueStatus, error) {
	var res QueueStatus
	err := c.doJSON(ctx, http.MethodGet, "/v1/queues", nil, &res)
	return res, err
}

// FlushQueues applies every pending session now, waiting at most timeout.
func (c *Client) FlushQueues(ctx context.Context, timeout time.Duration) (QueueFlushResult, error) {
	var req FlushRequest
	if timeout > 0 {
		req.Timeout = timeout.String()
	}
	var res QueueFlushResult
	err := c.doJSON(ctx, http.MethodPost, "/v1/queues/flush", req, &res)
	return res, err
}

// QueueDeadLetters lists up to limit sessions the store rejected.
func (c *Client) QueueDeadLetters(ctx context.Context, limit int) ([]QueueDeadLetter, error) {
	var res struct {
		DeadLetters []QueueDeadLetter `json:"deadLetters"`
	}
	err := c.doJSON(ctx, http.MethodGet, "/v1/queues/deadletters?limit="+strconv.Itoa(limit), nil, &res)
	return res.DeadLetters, err
}

// ReplayQueues restarts the selected stopped queues at their dead session
// (after its cause was fixed); it returns how many queues it restarted.
func (c *Client) ReplayQueues(ctx context.Context, sel QueueAction) (int, error) {
	var res struct {
		Done int `json:"done"`
	}
	err := c.doJSON(ctx, http.MethodPost, "/v1/queues/deadletters/replay", sel, &res)
	return res.Done, err
}

// DropQueueDeadLetters drops the selected queues' dead sessions for good
// and restarts the queues; it returns how many it dropped.
func (c *Client) DropQueueDeadLetters(ctx context.Context, sel QueueAction) (int, error) {
	var res struct {
		Done int `json:"done"`
	}
	err := c.doJSON(ctx, http.MethodPost, "/v1/queues/deadletters/drop", sel, &res)
	return res.Done, err
}
