// Package api is the HTTP face of the sidecar: the /v1 document, flush and
// status endpoints, health and readiness probes and /metrics, with bearer
// auth, body limits and the error model of docs/api.md. It translates HTTP
// to calls on document.Service and bgt.Applier and back; it holds no state.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/bgt"
	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/document"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/rscript"
	"github.com/writeback/writeback/internal/store"
	"github.com/writeback/writeback/pkg/client"
)

// RequestTimeout bounds every request but flush, which has its own.
const RequestTimeout = 30 * time.Second

// Options configure the handler.
type Options struct {
	Token string // bearer token required on /v1 when not empty
	// AdminToken, when not empty, is the only token the administrative
	// endpoints (flush, dead letters) accept; it is accepted everywhere
	// Token is.
	AdminToken   string
	MaxBodyBytes int64
	Version      string
	InstanceID   string
	Stores       map[string]store.Store
	Warnings     func() []string // extra warnings for /v1/status
}

// Handler serves the API.
type Handler struct {
	opt   Options
	svc   *document.Service
	app   *bgt.Applier
	buf   *buffer.Buffer
	m     *metrics.Metrics
	reg   prometheus.Gatherer
	log   *slog.Logger
	mux   *http.ServeMux
	rdb   redis.UniversalClient
	auth  []byte
	admin []byte
	// queues, set by RegisterSessions when queue families are configured,
	// makes /v1/flush apply pending sessions too and /v1/status report them.
	queues *Sessions
}

// DefaultMaxBodyBytes is the largest request body when Options sets none
// (limits.maxBodyBytes' default).
const DefaultMaxBodyBytes = 1 << 20

// New returns the API handler.
func New(opt Options, svc *document.Service, app *bgt.Applier, buf *buffer.Buffer, m *metrics.Metrics, reg prometheus.Gatherer, log *slog.Logger) *Handler {
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = DefaultMaxBodyBytes
	}
	h := &Handler{opt: opt, svc: svc, app: app, buf: buf, m: m, reg: reg, log: log, mux: http.NewServeMux(), rdb: buf.Client(), auth: []byte(opt.Token), admin: []byte(opt.AdminToken)}
	h.route("GET /v1/docs/{collection}/{id}", "get", h.getDoc)
	h.route("PUT /v1/docs/{collection}/{id}", "put", h.putDoc)
	h.route("PATCH /v1/docs/{collection}/{id}", "patch", h.patchDoc)
	h.route("DELETE /v1/docs/{collection}/{id}", "delete", h.deleteDoc)
	h.route("GET /v1/docs/{collection}", "scan", h.scan)
	h.routeAdmin("POST /v1/flush", "flush", h.flush)
	h.route("GET /v1/status", "status", h.status)
	h.routeAdmin("GET /v1/deadletters", "deadletters", h.listDead)
	h.routeAdmin("POST /v1/deadletters/{action}", "deadletters", h.actDead)
	h.route("/v1/", "other", func(w http.ResponseWriter, r *http.Request) error {
		return apiError(http.StatusNotFound, "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok\n")
	})
	h.mux.HandleFunc("GET /readyz", h.readyz)
	h.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Error is an error with its HTTP status and code.
type Error struct {
	Status int
	Code   string
	Msg    string
	// Retry: sending the request again is safe (nothing was buffered or
	// applied); the answer carries Retry-After and "retry": true.
	Retry bool
}

func (e *Error) Error() string { return e.Msg }

// apiError is an error of the API's own; 409 and 503 say nothing was done,
// so retrying them is safe.
func apiError(status int, code, msg string) *Error {
	return &Error{Status: status, Code: code, Msg: msg, Retry: status == http.StatusConflict || status == http.StatusServiceUnavailable}
}

// statusWriter remembers the status code for metrics.
type statusWriter struct {
	http.ResponseWriter
	code int
}

// Unwrap lets http.ResponseController reach the connection (flush sets
// its own write deadline).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// route serves an endpoint of the API; routeAdmin an administrative one,
// which needs auth.adminToken when it is set.
func (h *Handler) route(pattern, op string, fn func(http.ResponseWriter, *http.Request) error) {
	h.handle(pattern, op, false, fn)
}

func (h *Handler) routeAdmin(pattern, op string, fn func(http.ResponseWriter, *http.Request) error) {
	h.handle(pattern, op, true, fn)
}

func (h *Handler) handle(pattern, op string, admin bool, fn func(http.ResponseWriter, *http.Request) error) {
	h.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		var err error
		if err = h.authorize(r, admin); err == nil {
			err = checkContentType(r)
		}
		if err == nil {
			r.Body = http.MaxBytesReader(sw, r.Body, h.opt.MaxBodyBytes)
			if op != "flush" {
				// Bounded requests are part of the applied-records
				// compaction's safety argument (bgt.compactApplied).
				ctx, cancel := context.WithTimeout(r.Context(), RequestTimeout)
				defer cancel()
				r = r.WithContext(ctx)
			}
			err = fn(sw, r)
		}
		if err != nil {
			h.writeError(sw, r, err)
		}
		h.m.Requests.WithLabelValues(op, strconv.Itoa(sw.code)).Inc()
		h.m.RequestDuration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	})
}

// writeError renders an error in the error model: the API's own errors
// and the body limit here, everything else as document.Classify says.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var (
		ae  *Error
		mbe *http.MaxBytesError
	)
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &mbe):
		ae = apiError(http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the request body is larger than the limit of %d bytes", mbe.Limit))
	default:
		f := document.Classify(err)
		if re := (*rscript.ReplicationError)(nil); errors.As(err, &re) {
			h.m.ReplicationFailures.Inc()
		}
		switch {
		case f.Internal:
			h.log.Error(f.Log, "method", r.Method, "path", r.URL.Path, "err", err)
		case f.Log != "":
			h.log.Warn(f.Log, "method", r.Method, "path", r.URL.Path, "err", err)
		}
		ae = &Error{Status: f.Status, Code: f.Code, Msg: f.Msg, Retry: f.Retry == document.RetrySafe}
	}
	if ae.Retry {
		w.Header().Set("Retry-After", "1")
	}
	var body client.ErrorBody
	body.Error.Code, body.Error.Message, body.Error.Retry = ae.Code, ae.Msg, ae.Retry
	writeJSON(w, ae.Status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeDocs answers 200 {"docs":[…]} from documents already encoded
// (document.EncodeJSON's bodies, compact and valid, or null), as
// writeJSON would write a client.ScanResult or ManyResult but without
// validating and compacting every document again — most of a scan's
// encoding time.
func writeDocs(w http.ResponseWriter, docs []json.RawMessage) {
	b := make([]byte, 0, rawSize(docs)+len(`{"docs":}`)+1)
	b = appendValues(append(b, `{"docs":`...), docs)
	writeRaw(w, append(b, "}\n"...))
}

// rawSize is the bytes of vals written as a JSON array.
func rawSize(vals []json.RawMessage) int {
	n := 2
	for _, v := range vals {
		n += max(len(v), len("null")) + 1
	}
	return n
}

// appendValues appends vals, JSON already, as a JSON array, null for a
// nil one.
func appendValues(b []byte, vals []json.RawMessage) []byte {
	b = append(b, '[')
	for i, v := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		if v == nil {
			v = json.RawMessage("null")
		}
		b = append(b, v...)
	}
	return append(b, ']')
}

// writeRaw answers 200 with b, JSON already.
func writeRaw(w http.ResponseWriter, b []byte) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	// Its length, not chunks: a client reads it into one buffer.
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func readBody(r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	if n := r.ContentLength; n > 0 {
		// One allocation for a body of the length announced (ReadFrom
		// keeps MinRead free for the read that finds the end); no more
		// than the default limit up front, whatever a client announces.
		buf.Grow(int(min(n, DefaultMaxBodyBytes)) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(r.Body)
	b := buf.Bytes()
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, apiError(http.StatusBadRequest, "invalid_argument", "could not read the request body")
	}
	return b, nil
}

func (h *Handler) getDoc(w http.ResponseWriter, r *http.Request) error {
	body, tag, err := h.svc.GetJSON(r.Context(), r.PathValue("collection"), r.PathValue("id"))
	if err != nil {
		return err
	}
	w.Header().Set("ETag", tag)
	if match := r.Header.Get("If-None-Match"); match != "" && match == tag {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
	return nil
}

func (h *Handler) putDoc(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	seq, err := h.svc.Put(r.Context(), r.PathValue("collection"), r.PathValue("id"), body)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, client.WriteResult{Seq: seq})
	return nil
}

func (h *Handler) patchDoc(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	seq, err := h.svc.Patch(r.Context(), r.PathValue("collection"), r.PathValue("id"), body)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, client.WriteResult{Seq: seq})
	return nil
}

func (h *Handler) deleteDoc(w http.ResponseWriter, r *http.Request) error {
	seq, err := h.svc.Delete(r.Context(), r.PathValue("collection"), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, client.WriteResult{Seq: seq})
	return nil
}

// MaxScanLimit caps a scan's limit.
const MaxScanLimit = 1000

func (h *Handler) scan(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if q.Has("ids") || q.Has("id") {
		return h.getMany(w, r)
	}
	limit := 100
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxScanLimit {
			return apiError(http.StatusBadRequest, "invalid_argument", fmt.Sprintf("limit must be an integer from 1 to %d", MaxScanLimit))
		}
		limit = n
	}
	coll := r.PathValue("collection")
	c, err := h.svc.Collection(coll)
	if err != nil {
		return err
	}
	ds, err := h.svc.Scan(r.Context(), coll, q.Get("from"), limit)
	if err != nil {
		return err
	}
	docs := make([]json.RawMessage, len(ds))
	for i, d := range ds {
		docs[i] = document.EncodeJSON(c.Table.Schema, d)
	}
	writeDocs(w, docs)
	return nil
}

// flushTimeout reads a flush request's optional body, {"timeout":"30s"}
// (default 60 s).
func flushTimeout(r *http.Request) (time.Duration, error) {
	var req client.FlushRequest
	body, err := readBody(r)
	if err != nil {
		return 0, err
	}
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return 0, apiError(http.StatusBadRequest, "invalid_argument", `the flush body must be {"timeout":"30s"}`)
		}
	}
	if req.Timeout == "" {
		return 60 * time.Second, nil
	}
	d, err := time.ParseDuration(req.Timeout)
	if err != nil || d <= 0 {
		return 0, apiError(http.StatusBadRequest, "invalid_argument", fmt.Sprintf("timeout %q is not a positive duration such as 30s", req.Timeout))
	}
	return d, nil
}

// flushGrace is how long after its timeout a flush may still take to count
// what is pending and answer.
const flushGrace = 15 * time.Second

// extendWriteDeadline lets a flush answer after http.writeTimeout, which
// bounds every other request: a flush may wait up to its own timeout.
func extendWriteDeadline(w http.ResponseWriter, timeout time.Duration) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeout + flushGrace))
}

func (h *Handler) flush(w http.ResponseWriter, r *http.Request) error {
	timeout, err := flushTimeout(r)
	if err != nil {
		return err
	}
	extendWriteDeadline(w, timeout)
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	// Documents and sessions touch different keys and rows: flush both at
	// once, so that the timeout is the whole flush's.
	var (
		qres bgt.QueueFlushResult
		qerr error
		wg   sync.WaitGroup
	)
	if h.queues != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			qres, qerr = h.queues.Applier.Flush(ctx)
		}()
	}
	res, err := h.app.Flush(ctx)
	wg.Wait()
	if err != nil {
		return err
	}
	if qerr != nil {
		return qerr
	}
	st, err := h.buf.Stats(r.Context())
	if err != nil {
		return err
	}
	out := client.FlushResult{Applied: res.Applied, Pending: st.PendingChanges, DeadLetters: st.DeadLetters, Drained: res.Drained}
	if h.queues != nil {
		out.Sessions = &client.QueueFlushResult{Applied: qres.Applied, Pending: qres.Pending, Stopped: qres.Stopped, Drained: qres.Drained}
		out.Drained = out.Drained && qres.Drained && qres.Pending == 0
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request) error {
	st, err := h.buf.Stats(r.Context())
	if err != nil {
		return err
	}
	out := client.Status{
		Sidecar:                 h.opt.InstanceID,
		Version:                 h.opt.Version,
		Pending:                 st.PendingChanges,
		PendingDocuments:        st.PendingDocuments,
		PinnedBytes:             st.PinnedBytes,
		OldestPendingAgeSeconds: st.OldestPending.Seconds(),
		DeadLetters:             st.DeadLetters,
		Partitions:              h.buf.Partitions(),
		OwnedPartitions:         h.app.Owned(),
		Sidecars:                h.app.Sidecars(),
	}
	if st.DeadLetters > 0 {
		dls, err := h.buf.DeadLetters(r.Context(), 20)
		if err != nil {
			return err
		}
		for _, d := range dls {
			out.DeadLetterList = append(out.DeadLetterList, client.DeadLetter{Collection: d.Collection, ID: d.ID, Seq: d.Seq, Error: d.Error, At: d.At, Change: d.Changes})
		}
	}
	for name, c := range h.svc.Collections() {
		out.Collections = append(out.Collections, client.CollectionStatus{Name: name, Store: c.StoreName, Table: c.Table.Name, Policy: string(c.Policy),
			WriteThroughFallback: c.Policy == document.WriteBack && h.svc.Fallback()})
	}
	sortCollections(out.Collections)
	if h.queues != nil {
		qs, err := h.queues.Queues.Stats(r.Context())
		if err != nil {
			return err
		}
		out.Sessions = &client.SessionStatus{Pending: qs.PendingSessions, Queues: qs.Queues, StoppedQueues: qs.StoppedQueues,
			PinnedBytes: qs.PinnedBytes, OldestPendingAgeSeconds: qs.OldestPending.Seconds()}
	}
	if h.opt.Warnings != nil {
		out.Warnings = h.opt.Warnings()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deadLimit reads a dead-letter listing's ?limit= (1..10000, default 100).
func deadLimit(r *http.Request) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 10000 {
		return 0, apiError(http.StatusBadRequest, "invalid_argument", "limit must be an integer from 1 to 10000")
	}
	return n, nil
}

func (h *Handler) listDead(w http.ResponseWriter, r *http.Request) error {
	limit, err := deadLimit(r)
	if err != nil {
		return err
	}
	dls, err := h.buf.DeadLetters(r.Context(), limit)
	if err != nil {
		return err
	}
	out := struct {
		DeadLetters []client.DeadLetter `json:"deadLetters"`
	}{DeadLetters: []client.DeadLetter{}}
	for _, d := range dls {
		out.DeadLetters = append(out.DeadLetters, client.DeadLetter{Collection: d.Collection, ID: d.ID, Seq: d.Seq, Error: d.Error, At: d.At, Change: d.Changes})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deadAction reads a dead-letter action request — the path's action,
// replay or drop, and a JSON body selecting what it acts on — into sel,
// which valid checks; usage is the 400's advice.
func deadAction(r *http.Request, sel any, valid func() bool, usage string) (action string, err error) {
	action = r.PathValue("action")
	if action != "replay" && action != "drop" {
		return "", apiError(http.StatusNotFound, "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path+"; use replay or drop")
	}
	body, err := readBody(r)
	if err != nil {
		return "", err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(sel); err != nil || !valid() {
		return "", apiError(http.StatusBadRequest, "invalid_argument", usage)
	}
	return action, nil
}

// actDead replays or drops the dead letters a request selects.
func (h *Handler) actDead(w http.ResponseWriter, r *http.Request) error {
	var sel client.DeadLetterAction
	action, err := deadAction(r, &sel, func() bool { return sel.All || sel.Collection != "" && sel.ID != "" && sel.Seq > 0 },
		`select dead letters with {"collection":…,"id":…,"seq":…} or {"all":true}`)
	if err != nil {
		return err
	}
	dls, err := h.buf.DeadLetters(r.Context(), 1<<20)
	if err != nil {
		return err
	}
	done, found := 0, false
	for _, d := range dls {
		if !sel.All && (d.Collection != sel.Collection || d.ID != sel.ID || d.Seq != sel.Seq) {
			continue
		}
		found = true
		if action == "replay" {
			if err := h.svc.ReplayDeadLetter(r.Context(), d); err != nil {
				return err
			}
		} else if _, err := h.buf.DropDeadLetter(r.Context(), d.Collection, d.ID, d.Seq); err != nil {
			return err
		}
		done++
	}
	if !found && !sel.All {
		return apiError(http.StatusNotFound, "not_found", "no such dead letter")
	}
	writeJSON(w, http.StatusOK, map[string]int{"done": done})
	return nil
}

func sortCollections(cs []client.CollectionStatus) {
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].Name < cs[j-1].Name; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
}
