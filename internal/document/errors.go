package document

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/rscript"
	"github.com/writeback/writeback/internal/store"
)

// Errors the front doors map to status codes (Classify).
var (
	ErrUnknownCollection = errors.New("document: unknown collection")
	ErrNotFound          = errors.New("document: document not found")
	ErrConflict          = errors.New("document: too many concurrent writes to the document; retry")
	// ErrOverflow is an increment that would overflow an integer column or
	// make a float column infinite. Nothing was buffered.
	ErrOverflow = errors.New("document: increment or decrement would overflow")
)

// StoreError is a store failure: of a read (a miss, a scan), or of a
// synchronous write (write-through, write-around). Permanent ones of a
// write mean the store rejected the change, which was then discarded.
//
// Buffered is the sequence number of a change that is buffered and will be
// applied once the store recovers (a transient failure after buffering):
// the client must not retry it.
type StoreError struct {
	Err      error
	Buffered int64
	Read     bool // a read failed, not a write
}

func (e *StoreError) Error() string { return e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }

// Retry says whether a client may send a failed request again: what the
// failure left behind. The front doors render it in their own words (HTTP:
// the status, code, Retry-After and "retry"; RESP: the error's prefix).
type Retry int

const (
	// RetryNever: the request is wrong as sent (4xx); sending it again
	// fails again. Nothing was buffered.
	RetryNever Retry = iota
	// RetrySafe: nothing was buffered or applied; retry with backoff
	// (HTTP 409 or 503 with Retry-After, RESP TRYAGAIN).
	RetrySafe
	// RetryBuffered: the change is buffered (or the session committed)
	// and will be applied; retrying would apply it twice (HTTP 500
	// buffered, RESP BUFFERED).
	RetryBuffered
	// RetryUncertain: the change may or may not have been buffered or
	// applied; read before writing again (HTTP 500 uncertain, RESP
	// UNCERTAIN).
	RetryUncertain
)

// Failure is how a front door answers an error: the HTTP status and code of
// the error model (docs/api.md), and one sentence that quotes no stored
// data and no driver message. The HTTP API and the Redis-protocol port both
// render it, so that a client of either can tell the same things from it,
// retry-safety first.
type Failure struct {
	Status int    // 400, 404, 409, 500 or 503
	Code   string // invalid_argument, not_found, aborted, unavailable, buffered, uncertain
	Msg    string
	Retry  Retry
	// Log, when not empty, is what the front door should log at warning
	// level (Internal: error level) with the underlying error: the client
	// sees only Msg.
	Log      string
	Internal bool
}

// Classify maps an error of the document service to its Failure.
func Classify(err error) Failure {
	var (
		ce *change.Error
		se *StoreError
		re *rscript.ReplicationError
		sf *rscript.ShortfallError
	)
	switch {
	case errors.As(err, &ce):
		return Failure{Status: 400, Code: "invalid_argument", Msg: ce.Msg}
	case errors.Is(err, ErrUnknownCollection):
		return Failure{Status: 404, Code: "not_found", Msg: strings.TrimPrefix(err.Error(), "document: ")}
	case errors.Is(err, ErrNotFound):
		return Failure{Status: 404, Code: "not_found", Msg: "document not found"}
	case errors.Is(err, ErrConflict):
		return Failure{Status: 409, Code: "aborted", Msg: "too many concurrent writes to the document; retry with backoff", Retry: RetrySafe}
	case errors.Is(err, ErrOverflow):
		return Failure{Status: 400, Code: "invalid_argument", Msg: "increment or decrement would overflow"}
	case errors.As(err, &se) && store.IsPermanent(se.Err) && se.Read:
		return Failure{Status: 503, Code: "unavailable", Msg: "the store could not be read (" + StoreReason(se.Err) + ")", Log: "store read failed", Internal: true, Retry: RetrySafe}
	case errors.As(err, &se) && store.IsPermanent(se.Err):
		return Failure{Status: 400, Code: "invalid_argument", Msg: "the store rejected the change (" + StoreReason(se.Err) + ")", Log: "the store rejected a change"}
	case errors.As(err, &se) && se.Buffered > 0:
		return Failure{Status: 500, Code: "buffered", Log: "store unavailable for a synchronous write", Retry: RetryBuffered,
			Msg: fmt.Sprintf("the store is unavailable, but the change is buffered as seq %d and will be applied when it recovers, so do not retry it", se.Buffered)}
	case errors.As(err, &se):
		return Failure{Status: 503, Code: "unavailable", Msg: "the store is unavailable; retry with backoff", Log: "store unavailable", Retry: RetrySafe}
	case errors.As(err, &sf):
		return Failure{Status: 503, Code: "unavailable", Retry: RetrySafe,
			Msg: fmt.Sprintf("only %d of the %d required Redis replicas are in sync, so nothing was buffered; retry with backoff", sf.InSync, sf.Want)}
	case errors.As(err, &re):
		return Failure{Status: 500, Code: "uncertain", Log: "a write reached too few Redis replicas", Retry: RetryUncertain,
			Msg: fmt.Sprintf("the write reached only %d of the %d required Redis replicas in time, so it is not acknowledged (it may still be applied); read before writing again", re.Got, re.Want)}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return Failure{Status: 500, Code: "uncertain", Retry: RetryUncertain,
			Msg: "the request timed out or was cancelled, so a write may or may not have been applied; read before writing again"}
	case notSent(err):
		return Failure{Status: 503, Code: "unavailable", Msg: "Redis is unavailable; retry with backoff", Log: "Redis unavailable", Retry: RetrySafe}
	}
	return Failure{Status: 500, Code: "uncertain", Log: "request failed", Internal: true, Retry: RetryUncertain,
		Msg: "the cache failed midway, so a write may or may not have been applied; read before writing again (the sidecar's log has the cause)"}
}

// safeReplies are the Redis error replies of a command that did not run
// (out of memory, loading, a replica, a busy script …): a write answered
// with one changed nothing.
var safeReplies = []string{"OOM ", "LOADING ", "READONLY ", "MASTERDOWN ", "CLUSTERDOWN ", "TRYAGAIN ", "BUSY ", "NOSCRIPT ", "NOREPLICAS "}

// notSent reports whether err proves that Redis did not run the command:
// it could not be sent (no connection could be made or taken from the
// pool), or Redis refused it before running it.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	// go-redis does not export its pool's timeout error.
	if errors.Is(err, redis.ErrClosed) || strings.Contains(err.Error(), "redis: connection pool timeout") {
		return true
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range safeReplies {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
	}
	return false
}

// StoreReason is a short, data-free description of a store's rejection:
// the database's error class (SQLSTATE or MySQL error number) and its kind,
// without the message, which can quote other rows' values. The full error
// is logged.
func StoreReason(err error) string {
	msg := err.Error()
	for _, p := range []struct{ needle, reason string }{
		{"SQLSTATE 23", "a constraint was violated"},
		{"SQLSTATE 22", "a value does not fit its column"},
		{"Error 1062", "a unique constraint was violated"},
		{"Error 4025", "a check constraint was violated"},
		{"Error 3819", "a check constraint was violated"},
		{"Error 1048", "a NOT NULL column got null"},
		{"Error 1406", "a value is too long for its column"},
		{"Error 1264", "a value is out of range for its column"},
		{"Error 1452", "a foreign key was violated"},
	} {
		if i := strings.Index(msg, p.needle); i >= 0 {
			code := p.needle
			if end := strings.IndexAny(msg[i+len(p.needle):], ") :"); end >= 0 {
				code = msg[i : i+len(p.needle)+end]
			}
			return p.reason + ", " + code
		}
	}
	return "see the sidecar's log"
}

// OneLine makes an error's text fit one line of at most 300 bytes.
func OneLine(s string) string {
	s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
