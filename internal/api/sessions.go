package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/writeback/writeback/internal/bgt"
	"github.com/writeback/writeback/internal/document"
	"github.com/writeback/writeback/internal/jsonenc"
	"github.com/writeback/writeback/internal/session"
	"github.com/writeback/writeback/internal/store"
	"github.com/writeback/writeback/pkg/client"
)

// Sessions is what the session endpoints serve.
type Sessions struct {
	Service *session.Service
	Queues  *session.Queues
	Applier *bgt.QueueApplier
}

// RegisterSessions adds the Design 2 endpoints: sessions, mapped cache
// reads and the queues' status, flush and dead letters.
func (h *Handler) RegisterSessions(s Sessions) {
	sh := &sessionHandler{h: h, s: s}
	if len(s.Service.Families()) > 0 {
		h.queues = &s
	}
	h.route("POST /v1/sessions", "session", sh.begin)
	h.route("POST /v1/sessions/{id}/{action}", "session", sh.act)
	h.route("GET /v1/cache/{key...}", "cache", sh.read)
	h.route("GET /v1/cache", "cache", sh.readMany)
	h.route("GET /v1/queues", "queues", sh.status)
	h.routeAdmin("POST /v1/queues/flush", "flush", sh.flush)
	h.routeAdmin("GET /v1/queues/deadletters", "queues", sh.listDead)
	h.routeAdmin("POST /v1/queues/deadletters/{action}", "queues", sh.actDead)
}

type sessionHandler struct {
	h *Handler
	s Sessions
}

// sessionError maps the session package's errors to the error model;
// any other error is returned as it is, for writeError to classify and log.
func sessionError(w http.ResponseWriter, err error) error {
	if f, ok := sessionFailure(err); ok {
		return &Error{Status: f.Status, Code: f.Code, Msg: f.Msg, Retry: f.Retry == document.RetrySafe}
	}
	return err
}

// SessionFailure is how the API answers an error of the session service
// (the session package's own errors, then document.Classify's), so that
// the embedded mode (pkg/writeback) answers exactly as the endpoints do.
func SessionFailure(err error) document.Failure {
	if f, ok := sessionFailure(err); ok {
		return f
	}
	return document.Classify(err)
}

// sessionFailure classifies the session package's own errors; ok is false
// for any other error.
func sessionFailure(err error) (f document.Failure, ok bool) {
	var (
		ne *session.NotAppliedError
		ie *session.InvalidError
		ae *session.AbortedError
		qe *session.QueueStoppedError
	)
	// A NotAppliedError first: it wraps why applying failed, which may be
	// a QueueStoppedError, but the session is committed.
	switch {
	case errors.As(err, &ne):
		return document.Failure{Status: http.StatusInternalServerError, Code: "buffered", Msg: notAppliedMsg(ne), Retry: document.RetryBuffered,
			Log: "a write-through session is committed but not applied"}, true
	case errors.As(err, &ie):
		return document.Failure{Status: http.StatusBadRequest, Code: "invalid_argument", Msg: ie.Msg}, true
	case errors.As(err, &ae):
		return document.Failure{Status: http.StatusConflict, Code: "aborted", Msg: ae.Error(), Retry: document.RetrySafe}, true
	case errors.As(err, &qe):
		return document.Failure{Status: http.StatusServiceUnavailable, Code: "unavailable", Msg: qe.Error(), Retry: document.RetrySafe}, true
	case errors.Is(err, session.ErrUnknownSession):
		return document.Failure{Status: http.StatusNotFound, Code: "not_found", Msg: "unknown session: it never existed, timed out, or already committed or aborted"}, true
	case errors.Is(err, session.ErrNoMapping):
		return document.Failure{Status: http.StatusNotFound, Code: "not_found", Msg: "no mapping matches the key; configure one under mappings"}, true
	case errors.Is(err, session.ErrNotFound):
		return document.Failure{Status: http.StatusNotFound, Code: "not_found", Msg: "the key has no value"}, true
	}
	return document.Failure{}, false
}

func (sh *sessionHandler) begin(w http.ResponseWriter, r *http.Request) error {
	id, err := sh.s.Service.Begin(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, client.SessionStarted{Session: id})
	return nil
}

// leaseParam reads a cache read's lease parameter: whether it asks for X.
func leaseParam(r *http.Request) (forUpdate bool, err error) {
	switch l := r.URL.Query().Get("lease"); l {
	case "", "s":
		return false, nil
	case "x":
		return true, nil
	default:
		return false, apiError(http.StatusBadRequest, "invalid_argument", fmt.Sprintf("lease %q is not s or x", l))
	}
}

func (sh *sessionHandler) read(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	forUpdate, err := leaseParam(r)
	if err != nil {
		return err
	}
	v, err := sh.s.Service.Read(r.Context(), q.Get("session"), r.PathValue("key"), forUpdate)
	if err != nil {
		return sessionError(w, err)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(v)
	return nil
}

// readMany serves GET /v1/cache?key=a&key=b…&peek=c…: several mapped
// entries in one request (session.Service.ReadAll), the peeked ones
// without leases; with session=new, in a session it begins
// (session.Service.BeginReadAll).
func (sh *sessionHandler) readMany(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	forUpdate, err := leaseParam(r)
	if err != nil {
		return err
	}
	rd := session.Reads{Keys: q["key"], Peek: q["peek"], ForUpdate: forUpdate}
	if len(rd.Keys) == 0 && len(rd.Peek) == 0 {
		return apiError(http.StatusBadRequest, "invalid_argument", "name the keys to read: GET /v1/cache?key=a&key=b (peek=c: without a lease), or GET /v1/cache/{key} for one")
	}
	var res client.CacheManyResult
	sid := q.Get("session")
	if sid == "new" {
		res.Session, res.Values, res.Peeked, err = sh.s.Service.BeginReadAll(r.Context(), rd)
	} else {
		res.Values, res.Peeked, err = sh.s.Service.ReadAll(r.Context(), sid, rd)
	}
	if err != nil {
		return sessionError(w, err)
	}
	now := time.Now()
	keep := func(keys []string, vals []json.RawMessage) {
		for i, k := range keys {
			if vals[i] == nil {
				continue
			}
			if until, ok := sh.s.Service.KeptUntil(k); ok {
				if ms := until.Sub(now).Milliseconds(); ms > 0 {
					if res.Keep == nil {
						res.Keep = make(map[string]int64)
					}
					res.Keep[k] = ms
				}
			}
		}
	}
	if sid == "" {
		keep(rd.Keys, res.Values)
	}
	keep(rd.Peek, res.Peeked)
	writeCacheMany(w, res)
	return nil
}

// writeCacheMany answers 200 with res, the JSON writeJSON would write but
// with the values as they are: the session service's entries are compact
// JSON already (a commit's sets and a fill's rows are compacted before
// they are cached), and validating and compacting them again (and
// escaping their <, > and &) was most of a multi-read's encoding time.
func writeCacheMany(w http.ResponseWriter, res client.CacheManyResult) {
	b := make([]byte, 0, 64+len(res.Session)+rawSize(res.Values)+rawSize(res.Peeked)+64*len(res.Keep))
	b = append(b, '{')
	if res.Session != "" {
		b = append(jsonenc.String(append(b, `"session":`...), res.Session), ',')
	}
	b = appendValues(append(b, `"values":`...), res.Values)
	if len(res.Peeked) > 0 {
		b = appendValues(append(b, `,"peeked":`...), res.Peeked)
	}
	if len(res.Keep) > 0 {
		b = append(b, `,"keep":{`...)
		first := true
		for k, ms := range res.Keep {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = strconv.AppendInt(append(jsonenc.String(b, k), ':'), ms, 10)
		}
		b = append(b, '}')
	}
	writeRaw(w, append(b, "}\n"...))
}

func (sh *sessionHandler) act(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	switch r.PathValue("action") {
	case "commit":
		body, err := readBody(r)
		if err != nil {
			return err
		}
		req, err := session.DecodeCommit(body)
		switch {
		case errors.Is(err, session.ErrTrailing):
			return apiError(http.StatusBadRequest, "invalid_argument", err.Error())
		case err != nil:
			return apiError(http.StatusBadRequest, "invalid_argument", "the commit body is not valid: "+document.OneLine(err.Error())+`; send {"queue":…,"statements":[{"sql":…,"args":[…]}],"cache":[…],"affects":[…]}`)
		}
		res, err := sh.s.Service.Commit(r.Context(), id, req)
		var ne *session.NotAppliedError
		if errors.As(err, &ne) {
			sh.h.log.Warn("a write-through session is committed but not applied", "queue", ne.Queue, "seq", ne.Seq, "session", ne.Session, "err", ne.Err)
		}
		if err != nil {
			return sessionError(w, err)
		}
		writeJSON(w, http.StatusOK, client.CommitResult{Session: res.Session, Queue: res.Queue, Seq: res.Seq})
	case "validate":
		if err := sh.s.Service.Validate(r.Context(), id); err != nil {
			return sessionError(w, err)
		}
		writeJSON(w, http.StatusOK, client.SessionStarted{Session: id})
	case "abort":
		if err := sh.s.Service.Abort(r.Context(), id); err != nil {
			return sessionError(w, err)
		}
		writeJSON(w, http.StatusOK, client.SessionStarted{Session: id})
	default:
		return apiError(http.StatusNotFound, "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path+"; use commit, validate or abort")
	}
	return nil
}

// notAppliedMsg is the answer to a write-through commit that is committed
// in its queue but not applied: 500 buffered, retry false and no
// Retry-After, since committing the session again would apply it twice;
// the appliers apply it in order.
func notAppliedMsg(ne *session.NotAppliedError) string {
	var qe *session.QueueStoppedError
	why := "the store is unavailable"
	switch {
	case errors.As(ne.Err, &qe):
		why = "its queue is stopped by a session the store rejected (writeback sessions deadletters)"
	case errors.Is(ne.Err, context.DeadlineExceeded), errors.Is(ne.Err, context.Canceled):
		why = "the request timed out or was cancelled"
	case store.IsPermanent(ne.Err):
		why = "the store rejected a session (" + document.StoreReason(ne.Err) + ")"
	}
	return fmt.Sprintf("the session is committed in queue %s as seq %d but not yet applied to the store, because %s; the appliers will apply it, so do not commit it again", ne.Queue, ne.Seq, why)
}

func (sh *sessionHandler) status(w http.ResponseWriter, r *http.Request) error {
	st, err := sh.s.Queues.Stats(r.Context())
	if err != nil {
		return err
	}
	out := client.QueueStatus{
		PendingSessions:         st.PendingSessions,
		PinnedBytes:             st.PinnedBytes,
		OldestPendingAgeSeconds: st.OldestPending.Seconds(),
		Queues:                  st.Queues,
		StoppedQueues:           st.StoppedQueues,
		DeadLetters:             []client.QueueDeadLetter{},
		Partitions:              sh.s.Queues.Keys().Partitions(),
		OwnedPartitions:         sh.s.Applier.Owned(),
	}
	if st.StoppedQueues > 0 {
		dls, err := sh.s.Queues.DeadLetters(r.Context(), 20)
		if err != nil {
			return err
		}
		out.DeadLetters = deadLetters(dls)
	}
	for name, f := range sh.s.Service.Families() {
		out.Families = append(out.Families, client.QueueFamily{Name: name, Store: f.StoreName, Tables: f.Tables})
	}
	sort.Slice(out.Families, func(i, j int) bool { return out.Families[i].Name < out.Families[j].Name })
	writeJSON(w, http.StatusOK, out)
	return nil
}

func deadLetters(dls []session.DeadLetter) []client.QueueDeadLetter {
	out := make([]client.QueueDeadLetter, 0, len(dls))
	for _, d := range dls {
		stmts, _ := json.Marshal(d.Statements)
		out = append(out, client.QueueDeadLetter{Queue: d.Queue, Session: d.Session, Seq: d.Seq, Error: d.Error, At: d.At, Statements: stmts, Affects: d.Affects})
	}
	return out
}

func (sh *sessionHandler) flush(w http.ResponseWriter, r *http.Request) error {
	timeout, err := flushTimeout(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	res, err := sh.s.Applier.Flush(ctx)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, client.QueueFlushResult{Applied: res.Applied, Pending: res.Pending, Stopped: res.Stopped, Drained: res.Drained})
	return nil
}

func (sh *sessionHandler) listDead(w http.ResponseWriter, r *http.Request) error {
	limit, err := deadLimit(r)
	if err != nil {
		return err
	}
	dls, err := sh.s.Queues.DeadLetters(r.Context(), limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		DeadLetters []client.QueueDeadLetter `json:"deadLetters"`
	}{deadLetters(dls)})
	return nil
}

// actDead replays or drops the dead sessions of the selected queues.
func (sh *sessionHandler) actDead(w http.ResponseWriter, r *http.Request) error {
	var sel client.QueueAction
	action, err := deadAction(r, &sel, func() bool { return sel.All != (sel.Queue != "") },
		`select stopped queues with {"queue":"bank/3"} or {"all":true}`)
	if err != nil {
		return err
	}
	queues := []string{sel.Queue}
	if sel.All {
		dls, err := sh.s.Queues.DeadLetters(r.Context(), 1<<20)
		if err != nil {
			return err
		}
		queues = queues[:0]
		for _, d := range dls {
			queues = append(queues, d.Queue)
		}
	}
	done := 0
	for _, q := range queues {
		do := sh.s.Queues.Replay
		if action == "drop" {
			do = sh.s.Queues.Drop
		}
		ok, err := do(r.Context(), q)
		if err != nil {
			return err
		}
		if ok {
			done++
		}
	}
	if done == 0 && !sel.All {
		return apiError(http.StatusNotFound, "not_found", fmt.Sprintf("queue %q is not stopped", sel.Queue))
	}
	writeJSON(w, http.StatusOK, map[string]int{"done": done})
	return nil
}
