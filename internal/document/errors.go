package document

import (
	"context"
	"errors"
	"fmt"
	"strings"

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

// Failure is how a front door answers an error: the HTTP status and code of
// the error model (docs/api.md), and one sentence that quotes no stored
// data. The HTTP API and the Redis-protocol port both render it, so that a
// client of either can tell the same things from it, retry-safety first.
type Failure struct {
	Status int    // 400, 404, 409 or 503
	Code   string // invalid_argument, not_found, aborted, unavailable
	Msg    string
	// Conflict: the write lost a race and nothing was buffered; retry it
	// with backoff (HTTP adds Retry-After, RESP answers TRYAGAIN).
	Conflict bool
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
		return Failure{Status: 409, Code: "aborted", Msg: "too many concurrent writes to the document; retry with backoff", Conflict: true}
	case errors.Is(err, ErrOverflow):
		return Failure{Status: 400, Code: "invalid_argument", Msg: "increment or decrement would overflow"}
	case errors.As(err, &se) && store.IsPermanent(se.Err) && se.Read:
		return Failure{Status: 503, Code: "unavailable", Msg: "the store could not be read (" + StoreReason(se.Err) + ")", Log: "store read failed", Internal: true}
	case errors.As(err, &se) && store.IsPermanent(se.Err):
		return Failure{Status: 400, Code: "invalid_argument", Msg: "the store rejected the change (" + StoreReason(se.Err) + ")", Log: "the store rejected a change"}
	case errors.As(err, &se) && se.Buffered > 0:
		return Failure{Status: 503, Code: "unavailable", Log: "store unavailable for a synchronous write",
			Msg: fmt.Sprintf("the store is unavailable, but the change is buffered as seq %d and will be applied when it recovers, so do not retry it", se.Buffered)}
	case errors.As(err, &se):
		return Failure{Status: 503, Code: "unavailable", Msg: "the store is unavailable; retry with backoff", Log: "store unavailable"}
	case errors.As(err, &sf):
		return Failure{Status: 503, Code: "unavailable",
			Msg: fmt.Sprintf("only %d of the %d required Redis replicas are in sync, so nothing was buffered; retry with backoff", sf.InSync, sf.Want)}
	case errors.As(err, &re):
		return Failure{Status: 503, Code: "unavailable",
			Msg: fmt.Sprintf("the write reached only %d of the %d required Redis replicas in time, so it is not acknowledged (it may still be applied)", re.Got, re.Want)}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return Failure{Status: 503, Code: "unavailable", Msg: "the request timed out or was cancelled"}
	}
	return Failure{Status: 503, Code: "unavailable", Msg: "the cache or store is unavailable: " + OneLine(err.Error()), Log: "request failed", Internal: true}
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
