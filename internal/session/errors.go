package session

import (
	"errors"
	"fmt"
	"time"

	"github.com/writeback/writeback/internal/lease"
)

// Errors the API maps to status codes.
var (
	// ErrUnknownSession: no such session, or it timed out, committed or
	// aborted (404).
	ErrUnknownSession = errors.New("session: unknown session")
	// ErrNoMapping: no mapping matches the cache key (404).
	ErrNoMapping = errors.New("session: no mapping matches the key")
	// ErrNotFound: the mapping computes no value for the key (404).
	ErrNotFound = errors.New("session: the key has no value")
)

// InvalidError is a client's mistake: 400 with this one-sentence message.
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string { return e.Msg }

func invalid(format string, args ...any) error {
	return &InvalidError{Msg: fmt.Sprintf(format, args...)}
}

// Reasons of an AbortedError.
const (
	ReasonVoided   = "voided"   // a lease of the session was voided by a writer or an older session, or expired
	ReasonConflict = "conflict" // a lease it asked for was refused, or not granted within the wait
)

// AbortedError says the session must start over (409): its leases are
// released.
type AbortedError struct {
	Reason   string
	Conflict lease.Conflict // for ReasonConflict
	Key      string
	// Waited is how long the session waited for the lease before giving
	// up (writeback.leaseWait); 0 when it was refused at once.
	Waited time.Duration
}

func (e *AbortedError) Error() string {
	switch {
	case e.Reason == ReasonVoided:
		return fmt.Sprintf("the session's lease on %q was voided by a concurrent writer or an older session, or expired; the session is aborted, start it over", e.Key)
	case e.Waited > 0:
		return fmt.Sprintf("the lease on %q is held by a concurrent session (%s) that did not release it within %s; the session is aborted, start it over with backoff", e.Key, e.Conflict, e.Waited.Round(time.Millisecond))
	default:
		return fmt.Sprintf("the lease on %q is held by a concurrent session (%s); the session is aborted, start it over with backoff", e.Key, e.Conflict)
	}
}

// QueueStoppedError says a read needs sessions of a queue that a dead
// letter stopped (503).
type QueueStoppedError struct{ Queue string }

func (e *QueueStoppedError) Error() string {
	return fmt.Sprintf("queue %s is stopped by a session the store rejected; replay or drop it (writeback sessions deadletters)", e.Queue)
}

// NotAppliedError says a write-through commit is committed in its queue
// (durable in Redis, at Seq) but the store has not applied it yet: the
// appliers will, in order, so the client must not commit it again (HTTP
// 500 buffered: durable, not retry-safe).
type NotAppliedError struct {
	Session string
	Queue   string
	Seq     int64
	Err     error // why applying failed
}

func (e *NotAppliedError) Error() string {
	return fmt.Sprintf("the session is committed in queue %s as seq %d but not yet applied to the store (%v); the appliers will apply it, so do not commit it again", e.Queue, e.Seq, e.Err)
}

func (e *NotAppliedError) Unwrap() error { return e.Err }
