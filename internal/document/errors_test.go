package document

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/rscript"
	"github.com/writeback/writeback/internal/store"
)

// TestClassify checks the one classification both front doors render: the
// status and code of each class of error, which ones a client may retry,
// and that a store's rejection is described without the store's message
// (which can quote other rows).
func TestClassify(t *testing.T) {
	secret := `ERROR: duplicate key value violates unique constraint "u" (SQLSTATE 23505): Key (email)=(alice@example.com) already exists`
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	read := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	tests := []struct {
		name   string
		err    error
		status int
		code   string
		retry  Retry
		has    string // Msg contains it
	}{
		{"bad input", &change.Error{Msg: "unknown field \"x\""}, 400, "invalid_argument", RetryNever, `unknown field "x"`},
		{"unknown collection", fmt.Errorf("%w %q", ErrUnknownCollection, "nope"), 404, "not_found", RetryNever, `unknown collection "nope"`},
		{"missing document", ErrNotFound, 404, "not_found", RetryNever, "document not found"},
		{"conflict", ErrConflict, 409, "aborted", RetrySafe, "retry with backoff"},
		{"overflow", ErrOverflow, 400, "invalid_argument", RetryNever, "would overflow"},
		{"store rejection", &StoreError{Err: &store.Error{Permanent: true, Err: errors.New(secret)}}, 400, "invalid_argument", RetryNever, "a constraint was violated, SQLSTATE 23505"},
		{"store down after buffering", &StoreError{Err: errors.New("connection refused"), Buffered: 42}, 500, "buffered", RetryBuffered, "buffered as seq 42"},
		{"store down", &StoreError{Err: errors.New("connection refused")}, 503, "unavailable", RetrySafe, "retry with backoff"},
		{"replicas", &rscript.ReplicationError{Got: 0, Want: 1}, 500, "uncertain", RetryUncertain, "0 of the 1 required Redis replicas"},
		{"timeout", fmt.Errorf("x: %w", context.DeadlineExceeded), 500, "uncertain", RetryUncertain, "timed out"},
		{"replica shortfall", &rscript.ShortfallError{InSync: 0, Want: 2}, 503, "unavailable", RetrySafe, "only 0 of the 2 required Redis replicas are in sync, so nothing was buffered"},
		{"Redis refuses connections", fmt.Errorf("buffer: %w", dial), 503, "unavailable", RetrySafe, "Redis is unavailable; retry with backoff"},
		{"Redis's pool is exhausted", errors.New("redis: connection pool timeout"), 503, "unavailable", RetrySafe, "Redis is unavailable"},
		{"Redis out of memory", redisReply("OOM command not allowed when used memory > 'maxmemory'."), 503, "unavailable", RetrySafe, "Redis is unavailable"},
		{"Redis fails midway", fmt.Errorf("buffer: %w", read), 500, "uncertain", RetryUncertain, "may or may not have been applied"},
		{"a script's error", redisReply("ERR user_script:12: attempt to index a nil value"), 500, "uncertain", RetryUncertain, "the sidecar's log has the cause"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := Classify(tc.err)
			if f.Status != tc.status || f.Code != tc.code || f.Retry != tc.retry {
				t.Errorf("Classify = %d %s retry=%v, want %d %s retry=%v", f.Status, f.Code, f.Retry, tc.status, tc.code, tc.retry)
			}
			if !strings.Contains(f.Msg, tc.has) {
				t.Errorf("message %q does not say %q", f.Msg, tc.has)
			}
			if strings.Contains(f.Msg, "alice") || strings.Contains(f.Msg, "\n") {
				t.Errorf("message %q quotes stored data or spans lines", f.Msg)
			}
			// The driver's words never reach the client.
			for _, raw := range []string{"connection refused", "reset by peer", "user_script", "pool timeout", "maxmemory"} {
				if strings.Contains(f.Msg, raw) {
					t.Errorf("message %q quotes the driver's error (%q)", f.Msg, raw)
				}
			}
		})
	}
}

// redisReply is an error reply of Redis, as go-redis returns it.
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}
