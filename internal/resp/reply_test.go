package resp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/writeback/writeback/internal/document"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/rscript"
)

// toRESP words document.Classify's retry-safety as an error prefix, and
// never quotes the driver's error.
func TestToRESP(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), m: metrics.New(nil)}
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	read := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("read: connection reset by peer")}
	tests := []struct {
		name string
		err  error
		want string // the reply's beginning
		code int
	}{
		{"conflict", document.ErrConflict, "TRYAGAIN too many concurrent writes", 409},
		{"store down before buffering", &document.StoreError{Err: dial}, "TRYAGAIN the store is unavailable; retry with backoff", 503},
		{"Redis refuses connections", fmt.Errorf("buffer: %w", dial), "TRYAGAIN Redis is unavailable; retry with backoff", 503},
		{"store down after buffering", &document.StoreError{Err: dial, Buffered: 7}, "BUFFERED the store is unavailable, but the change is buffered as seq 7", 500},
		{"too few replicas", &rscript.ReplicationError{Got: 0, Want: 1}, "UNCERTAIN the write reached only 0 of the 1 required Redis replicas", 500},
		{"timeout", fmt.Errorf("x: %w", context.DeadlineExceeded), "UNCERTAIN the request timed out", 500},
		{"Redis fails midway", fmt.Errorf("buffer: %w", read), "UNCERTAIN the cache failed midway", 500},
		{"bad input", document.ErrOverflow, "ERR increment or decrement would overflow", 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := testutil.ToFloat64(s.m.ReplicationFailures)
			e := s.toRESP(tc.err)
			var re *rscript.ReplicationError
			if got := testutil.ToFloat64(s.m.ReplicationFailures) - before; got != map[bool]float64{true: 1}[errors.As(tc.err, &re)] {
				t.Errorf("writeback_redis_replication_failures_total grew by %v", got)
			}
			if !strings.HasPrefix(e.msg, tc.want) || e.code != tc.code {
				t.Errorf("toRESP = %q (%d); want %q… (%d)", e.msg, e.code, tc.want, tc.code)
			}
			for _, raw := range []string{"refused", "reset", "dial"} {
				if strings.Contains(e.msg, raw) {
					t.Errorf("toRESP = %q quotes the driver's error", e.msg)
				}
			}
		})
	}
}
