package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// Only errors the data may cause isolate; errors of the store as a whole
// (connections, read-only, resources, contention, privileges) never do.
func TestIsolable(t *testing.T) {
	pg := func(code string) error {
		return &Error{Err: fmt.Errorf("store: apply: %w", &pgconn.PgError{Code: code, Message: "x"})}
	}
	my := func(n uint16) error {
		return &Error{Err: fmt.Errorf("store: apply: %w", &mysql.MySQLError{Number: n, Message: "x"})}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"pg raise exception", pg("P0001"), true},
		{"pg index row too large", pg("54000"), true},
		{"pg statement timeout", pg("57014"), true},
		{"session statement", &SessionError{Index: 1, Err: pg("P0001")}, true},
		{"pg read-only", pg("25006"), false},
		{"pg admin shutdown", pg("57P01"), false},
		{"pg too many connections", pg("53300"), false},
		{"pg deadlock", pg("40P01"), false},
		{"pg lock not available", pg("55P03"), false},
		{"pg privilege", pg("42501"), false},
		{"pg connection", pg("08006"), false},
		{"mysql signal", my(1644), true},
		{"mariadb statement timeout", my(1969), true},
		{"mysql read-only", my(1290), false},
		{"mariadb read-only", my(1836), false},
		{"mysql lock wait timeout", my(1205), false},
		{"mysql too many connections", my(1040), false},
		{"permanent", &Error{Permanent: true, Err: errors.New("check")}, false},
		{"network", &Error{Err: &net.OpError{Op: "dial", Err: errors.New("refused")}}, false},
		{"deadline", &Error{Err: context.DeadlineExceeded}, false},
		{"unknown", errors.New("bad connection"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Isolable(tc.err); got != tc.want {
				t.Errorf("Isolable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
