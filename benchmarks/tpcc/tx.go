package tpcc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Row is one row of a mapped entry: column → value. Values are what the
// executor decodes (json.Number, string, nil from a sidecar; Go types from
// pgx); read them with Int, Float and Str.
type Row map[string]any

// Lease says how a transaction reads an entry.
type Lease int

const (
	// Unleased: an entry of columns no transaction changes (or a value
	// that may be slightly stale, as Stock-Level may read): read outside
	// the session, without a lease.
	Unleased Lease = iota
	// Shared: read under the session's S lease (the database: a plain
	// SELECT in the transaction).
	Shared
	// ForUpdate: read under an S lease that the commit turns into an X
	// lease (the database: SELECT … FOR UPDATE).
	ForUpdate
)

// Tx is one attempt of a TPC-C transaction, on a policy's executor: reads
// of mapped entries, then statements and cache changes, then Commit.
// Statements use PostgreSQL placeholders ($1 …); the MySQL executors
// translate them (MyStatement).
type Tx interface {
	// Get reads a single-row entry; ok is false when it has no value.
	Get(ctx context.Context, m *Mapping, l Lease, params ...any) (Row, bool, error)
	// GetMany reads several single-row entries in one round trip: rows[i]
	// is reads[i]'s row, nil when it has no value.
	GetMany(ctx context.Context, l Lease, reads []Read) ([]Row, error)
	// GetWith reads in one round trip the single-row entries of leased
	// under l and those of peek unleased: rows[i] is leased[i]'s row and
	// peeked[j] peek[j]'s, nil when it has no value.
	GetWith(ctx context.Context, l Lease, leased, peek []Read) (rows, peeked []Row, err error)
	// List reads a many-row entry; ListMany several, in one round trip.
	List(ctx context.Context, m *Mapping, l Lease, params ...any) ([]Row, error)
	ListMany(ctx context.Context, l Lease, reads []Read) ([][]Row, error)
	// Exec adds a statement (the database runs it now).
	Exec(ctx context.Context, sql string, args ...any) error
	// Patch changes a cached entry with update operators; Affect drops one.
	Patch(key string, patch map[string]any)
	Affect(key string)
	// Set gives an entry its new value: exactly the JSON its mapping
	// computes from the committed rows.
	Set(key string, value json.RawMessage)
	// Commit commits into queue (a read-only transaction: ""). Rollback
	// ends the attempt without committing.
	Commit(ctx context.Context, queue string) error
	Rollback(ctx context.Context)
}

// Read names one entry of a GetMany.
type Read struct {
	M      *Mapping
	Params []any
}

// leases is l for each of n reads.
func leases(l Lease, n int) []Lease {
	out := make([]Lease, n)
	for i := range out {
		out[i] = l
	}
	return out
}

// getWith is a database's GetWith: queryMany runs peek and then leased
// (under l) as one batch, so that its row locks (FOR UPDATE) are taken
// last.
func getWith(queryMany func([]Read, []Lease) ([][]Row, error), l Lease, leased, peek []Read) (rows, peeked []Row, err error) {
	reads := append(append(make([]Read, 0, len(peek)+len(leased)), peek...), leased...)
	lists, err := queryMany(reads, append(leases(Unleased, len(peek)), leases(l, len(leased))...))
	if err != nil {
		return nil, nil, err
	}
	all := firstRows(lists)
	return all[len(peek):], all[:len(peek)], nil
}

// Executor begins transactions of one policy.
type Executor interface {
	Begin(ctx context.Context) (Tx, error)
	// Retryable reports whether err means the transaction lost a conflict
	// (a 409 from the sidecar, a serialization failure or deadlock in the
	// database) and should be run again.
	Retryable(err error) bool
	Close() error
}

// errRollback is New-Order's intended rollback (an unused item number).
var errRollback = errors.New("tpcc: rolled back (unused item)")

// Int reads an integer column.
func (r Row) Int(col string) (int, error) {
	switch v := r[col].(type) {
	case int:
		return v, nil
	case int32:
		return int(v), nil
	case int64:
		return int(v), nil
	case float64:
		return int(v), nil
	case json.Number:
		i, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			f, ferr := v.Float64()
			if ferr != nil {
				return 0, fmt.Errorf("tpcc: column %s = %v is not an integer", col, v)
			}
			return int(f), nil
		}
		return int(i), nil
	case pgtype.Numeric:
		f, err := v.Float64Value()
		return int(f.Float64), err
	case nil:
		return 0, fmt.Errorf("tpcc: column %s is missing or null", col)
	}
	return 0, fmt.Errorf("tpcc: column %s has type %T, not an integer", col, r[col])
}

// Float reads a numeric column.
func (r Row) Float(col string) (float64, error) {
	switch v := r[col].(type) {
	case float64:
		return v, nil
	case float32:
		return float64(v), nil
	case int32:
		return float64(v), nil
	case int64:
		return float64(v), nil
	case int:
		return float64(v), nil
	case json.Number:
		return v.Float64()
	case pgtype.Numeric:
		f, err := v.Float64Value()
		return f.Float64, err
	case nil:
		return 0, fmt.Errorf("tpcc: column %s is missing or null", col)
	}
	return 0, fmt.Errorf("tpcc: column %s has type %T, not a number", col, r[col])
}

// Str reads a text column.
func (r Row) Str(col string) string {
	switch v := r[col].(type) {
	case string:
		return v
	case nil:
		return ""
	case time.Time:
		return v.Format(time.RFC3339Nano)
	}
	return fmt.Sprint(r[col])
}

// IsNull reports whether a column is null (or absent).
func (r Row) IsNull(col string) bool { return r[col] == nil }

// cents rounds money to cents.
func cents(v float64) float64 { return math.Round(v*100) / 100 }

// timestamp is the text of a timestamp argument: sessions' arguments are
// JSON, and statements cast it (CAST($n AS timestamp)).
func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") }
