package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/writeback/writeback/internal/jsonenc"
)

// AppliedSessionsTable holds the id of every session applied (Design 2),
// written in the same transaction as the session's statements: a replay
// after a crash finds the id and skips the session.
const AppliedSessionsTable = "writeback_applied_sessions"

// Session is one committed session of Design 2 that an applier hands to the
// store: its statements, to run in order in one transaction.
type Session struct {
	ID         string // unique; the key of its applied record
	Queue      string // the queue it was committed to ("bank/3")
	Seq        int64  // its position in the queue
	Statements []Statement
	// Role, when set, is the database role the statements run under
	// (PostgreSQL: SET LOCAL ROLE around them); the sidecar's bookkeeping
	// runs as its own user. A statement the role may not run
	// (insufficient privilege) is then the session's fault: permanent.
	Role string
	// Lock, when set, names a lock the batch's transaction takes before
	// anything else and holds until it ends, so that batches naming the
	// same Lock are applied one at a time, by every applier of every
	// sidecar (a queue family's serial: its queues share rows, and their
	// batches would otherwise wait on each other's row locks or
	// deadlock). Every session of a batch names the same Lock.
	Lock string
}

// Statement is one parameterised DML statement, with its arguments as JSON
// values (placeholders in the store's own style: $1 or ?).
type Statement struct {
	SQL  string            `json:"sql"`
	Args []json.RawMessage `json:"args,omitempty"`
}

// AppliedSession is one row of writeback_applied_sessions.
type AppliedSession struct {
	ID    string
	Queue string
	Seq   int64
}

// SessionStore is a SQL database that applies sessions. Both SQL adapters
// implement it; Sessions finds it behind a Store.
//
// ApplySessions is Design 2's exactly-once: in ONE transaction it (0) takes
// the batch's lock, if it names one (Session.Lock); (1) reads
// which of the sessions' ids are already in writeback_applied_sessions and
// leaves those sessions out; (2) inserts the ids of the others; (3) runs
// their statements, session after session in the given order; (4) commits.
// applied[i] is false for a session skipped as already applied. Two
// appliers racing over the same sessions cannot both apply one: the second
// insert of an id waits for the first transaction and then fails, which is
// reported as a transient *Error (retry: the next attempt skips it).
//
// A statement the database rejects rolls everything back and returns an
// *Error wrapping a *SessionError that names the session and statement; it
// is permanent when the data is at fault (constraint, type, unknown
// column), which dead-letters that session.
type SessionStore interface {
	// Dialect is "postgres" or "mysql": the placeholder style of statements.
	Dialect() string
	// PrepareSessions creates writeback_applied_sessions if it is missing.
	PrepareSessions(ctx context.Context) error
	// ApplySessions applies sessions exactly once, in order (see above).
	ApplySessions(ctx context.Context, sessions []Session) (applied []bool, err error)
	// QueryJSON runs a read-only query with args and returns each row as a
	// JSON object, columns in the query's order (see columnJSON).
	QueryJSON(ctx context.Context, query string, args ...any) ([]json.RawMessage, error)
	// ListAppliedSessions pages through the applied records in id order,
	// starting after afterID.
	ListAppliedSessions(ctx context.Context, afterID string, limit int) ([]AppliedSession, error)
	// CompactAppliedSessions deletes the applied records of ids and returns
	// how many it deleted.
	CompactAppliedSessions(ctx context.Context, ids []string) (int, error)
	// CountAppliedSessions returns the number of applied records.
	CountAppliedSessions(ctx context.Context) (int64, error)
	// CheckRole fails unless sessions can run under role (Session.Role).
	CheckRole(ctx context.Context, role string) error
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
}

// SessionLockPreparer is a SessionStore whose session locks
// (Session.Lock) live in a table of their own (MySQL and MariaDB);
// PrepareSessionLocks creates it if it is missing. The appliers call it for
// the stores of serial families only.
type SessionLockPreparer interface {
	PrepareSessionLocks(ctx context.Context) error
}

// Sessions returns st's SessionStore, if it has one.
func Sessions(st Store) (SessionStore, bool) {
	ss, ok := st.(SessionStore)
	return ss, ok
}

// SessionError says which statement of which session the database
// rejected.
type SessionError struct {
	Index     int    // the session's index in the batch
	ID        string // the session's id
	Statement int    // the statement's index in the session
	Err       error
}

func (e *SessionError) Error() string {
	return fmt.Sprintf("session %s, statement %d: %v", e.ID, e.Statement+1, e.Err)
}

func (e *SessionError) Unwrap() error { return e.Err }

// FailedSession returns the index in the batch of the session the store
// rejected, if err says so.
func FailedSession(err error) (int, bool) {
	var se *SessionError
	if errors.As(err, &se) {
		return se.Index, true
	}
	return 0, false
}

// ErrConcurrentApply is the transient error of a lost race between two
// appliers of the same sessions (members of one deployment, or a miss and
// the queue's owner): the other one applied some of them, so the queue
// moved on, and reading its head again finds what is left.
var ErrConcurrentApply = errors.New("store: another applier applied some of these sessions concurrently; retry")

// IsConcurrentApply reports whether err is a lost race of ApplySessions
// (ErrConcurrentApply): progress, not a failure.
func IsConcurrentApply(err error) bool { return errors.Is(err, ErrConcurrentApply) }

// sessionStmtError wraps a database error of statement stmt of session i.
func sessionStmtError(sessions []Session, i, stmt int, err error, permanent func(error) bool) error {
	return &Error{Permanent: permanent(err), Err: &SessionError{Index: i, ID: sessions[i].ID, Statement: stmt, Err: err}}
}

// checkSessions validates a batch: ids unique and non-empty.
func checkSessions(sessions []Session) error {
	seen := make(map[string]bool, len(sessions))
	for i, s := range sessions {
		if s.ID == "" || len(s.ID) > 64 {
			return fmt.Errorf("store: session %d has an empty or overlong id", i)
		}
		if seen[s.ID] {
			return fmt.Errorf("store: session %s appears twice in one batch", s.ID)
		}
		seen[s.ID] = true
		if s.Lock != sessions[0].Lock {
			return fmt.Errorf("store: session %s names lock %q and session %s lock %q: a batch takes one lock", s.ID, s.Lock, sessions[0].ID, sessions[0].Lock)
		}
	}
	return nil
}

// argValue converts a JSON argument of a statement to a driver value. For
// PostgreSQL numbers stay their decimal text, which the server parses into
// the parameter's type exactly; MySQL gets int64 for integers and float64
// otherwise (interpolated as a decimal literal). Objects and arrays are
// their JSON text (for json columns).
func argValue(dialect string, v json.RawMessage) (any, error) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return nil, errors.New("empty argument")
	}
	switch v[0] {
	case 'n':
		return nil, nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	case '"':
		s, err := unquoteJSON(string(v))
		if err != nil {
			return nil, err
		}
		return s, nil
	case '{', '[':
		if !json.Valid(v) {
			return nil, errors.New("invalid JSON argument")
		}
		return string(v), nil
	}
	if !isJSONNumber(v) { // the only JSON left
		return nil, fmt.Errorf("invalid JSON argument %q", v)
	}
	if dialect == "postgres" {
		return string(v), nil
	}
	if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return nil, fmt.Errorf("argument %s is out of range", v)
	}
	return f, nil
}

// statementArgs converts a statement's arguments.
func statementArgs(dialect string, st Statement) ([]any, error) {
	out := make([]any, len(st.Args))
	for i, a := range st.Args {
		v, err := argValue(dialect, a)
		if err != nil {
			return nil, &Error{Permanent: true, Err: fmt.Errorf("store: argument %d: %w", i+1, err)}
		}
		out[i] = v
	}
	return out, nil
}

// jsonKind is how a column's text becomes JSON.
type jsonKind int

const (
	jsonString jsonKind = iota // a JSON string of the text
	jsonNumber                 // the text itself when it is a JSON number (NaN, Infinity: a string)
	jsonBool                   // t/f, 1/0, true/false
	jsonRaw                    // the text is JSON (json, jsonb)
)

// appendColumn appends one column's text (valid false: NULL) as JSON.
func appendColumn(b []byte, k jsonKind, text []byte, valid bool) []byte {
	if !valid {
		return append(b, "null"...)
	}
	switch k {
	case jsonNumber:
		if isJSONNumber(text) {
			return append(b, text...)
		}
	case jsonBool:
		switch string(text) {
		case "t", "1", "true", "TRUE":
			return append(b, "true"...)
		case "f", "0", "false", "FALSE":
			return append(b, "false"...)
		}
	case jsonRaw:
		if json.Valid(text) {
			return append(b, text...)
		}
	}
	return jsonenc.String(b, string(text))
}

// rowJSON renders the rows of one result as JSON objects, columns in
// order.
type rowJSON struct {
	keys  []string // each column's name JSON-encoded, and a colon
	kinds []jsonKind
}

func newRowJSON(cols []string, kinds []jsonKind) rowJSON {
	keys := make([]string, len(cols))
	for i, c := range cols {
		keys[i] = string(append(jsonenc.String(nil, c), ':'))
	}
	return rowJSON{keys: keys, kinds: kinds}
}

// row renders one row of column texts (nil: NULL) into one buffer.
func row[T ~[]byte](rj rowJSON, vals []T) json.RawMessage {
	n := 2
	for i, v := range vals {
		n += len(rj.keys[i]) + len(v) + 8 // a comma, quotes, a few escapes
	}
	b := append(make([]byte, 0, n), '{')
	for i, v := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendColumn(append(b, rj.keys[i]...), rj.kinds[i], v, v != nil)
	}
	return append(b, '}')
}

// sessionCompactChunk bounds the ids one compaction statement names.
const sessionCompactChunk = 500
