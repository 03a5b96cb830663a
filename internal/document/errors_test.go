package document

import (
	"context"
	"errors"
	"fmt"
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
	tests := []struct {
		name     string
		err      error
		status   int
		code     string
		conflict bool
		has      string // Msg contains it
	}{
		{"bad input", &change.Error{Msg: "unknown field \"x\""}, 400, "invalid_argument", false, `unknown field "x"`},
		{"unknown collection", fmt.Errorf("%w %q", ErrUnknownCollection, "nope"), 404, "not_found", false, `unknown collection "nope"`},
		{"missing document", ErrNotFound, 404, "not_found", false, "document not found"},
		{"conflict", ErrConflict, 409, "aborted", true, "retry with backoff"},
		{"overflow", ErrOverflow, 400, "invalid_argument", false, "would overflow"},
		{"store rejection", &StoreError{Err: &store.Error{Permanent: true, Err: errors.New(secret)}}, 400, "invalid_argument", false, "a constraint was violated, SQLSTATE 23505"},
		{"store down after buffering", &StoreError{Err: errors.New("connection refused"), Buffered: 42}, 503, "unavailable", false, "buffered as seq 42"},
		{"store down", &StoreError{Err: errors.New("connection refused")}, 503, "unavailable", false, "retry with backoff"},
		{"replicas", &rscript.ReplicationError{Got: 0, Want: 1}, 503, "unavailable", false, "0 of the 1 required Redis replicas"},
		{"replica shortfall", &rscript.ShortfallError{InSync: 0, Want: 2}, 503, "unavailable", false, "only 0 of the 2 required Redis replicas are in sync, so nothing was buffered"},
		{"timeout", fmt.Errorf("x: %w", context.DeadlineExceeded), 503, "unavailable", false, "timed out"},
		{"anything else", errors.New("redis: connection pool timeout"), 503, "unavailable", false, "cache or store is unavailable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := Classify(tc.err)
			if f.Status != tc.status || f.Code != tc.code || f.Conflict != tc.conflict {
				t.Errorf("Classify = %d %s conflict=%v, want %d %s conflict=%v", f.Status, f.Code, f.Conflict, tc.status, tc.code, tc.conflict)
			}
			if !strings.Contains(f.Msg, tc.has) {
				t.Errorf("message %q does not say %q", f.Msg, tc.has)
			}
			if strings.Contains(f.Msg, "alice") || strings.Contains(f.Msg, "\n") {
				t.Errorf("message %q quotes stored data or spans lines", f.Msg)
			}
		})
	}
}
