package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/testenv"
)

// harness is one open test database.
type harness struct {
	driver string
	dsn    string
	s      Store
}

// eachStore runs f, in parallel subtests, against every test database.
func eachStore(t *testing.T, f func(t *testing.T, h *harness)) {
	stores, names := testStores(t)
	for _, name := range names {
		cfg := stores[name]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := Open(ctx, cfg.Driver, cfg.DSN)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			f(t, &harness{driver: cfg.Driver, dsn: cfg.DSN, s: s})
		})
	}
}

// testStores returns the test databases and their names, sorted.
func testStores(t testing.TB) (map[string]testenv.Store, []string) {
	stores := testenv.Stores(t)
	names := make([]string, 0, len(stores))
	for name := range stores {
		names = append(names, name)
	}
	slices.Sort(names)
	return stores, names
}

// exec runs raw SQL on the test database.
func (h *harness) exec(t testing.TB, query string, args ...any) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch s := h.s.(type) {
	case *pgStore:
		_, err = s.pool.Exec(ctx, query, args...)
	case *myStore:
		_, err = s.db.ExecContext(ctx, query, args...)
	default:
		t.Fatalf("unknown store %T", h.s)
	}
	require.NoError(t, err, query)
}

// table creates a uniquely named table from the DDL of this driver (%[1]s
// is the name) and drops it when the test ends. More DDL, run first
// (types, …), and its cleanup can come in before/after.
func (h *harness) table(t testing.TB, ddl map[string]string) string {
	t.Helper()
	name := testenv.UniqueName(t, "st")
	stmt, ok := ddl[h.driver]
	require.True(t, ok, "no DDL for %s", h.driver)
	h.exec(t, fmt.Sprintf(stmt, name))
	t.Cleanup(func() { h.exec(t, "DROP TABLE IF EXISTS "+name) })
	return name
}

// describe creates a table and describes it with key "id".
func (h *harness) describe(t testing.TB, ddl map[string]string) *Table {
	t.Helper()
	name := h.table(t, ddl)
	tbl, err := h.s.Describe(t.Context(), name, "id")
	require.NoError(t, err)
	return tbl
}

func (h *harness) apply(t *testing.T, writes ...Write) []Result {
	t.Helper()
	res, err := h.s.Apply(t.Context(), writes)
	require.NoError(t, err)
	require.Len(t, res, len(writes))
	return res
}

// read reads a document of partition 0 (readIn: of another one).
func (h *harness) read(t *testing.T, tbl *Table, collection, id string) (map[string]string, int64) {
	t.Helper()
	return h.readIn(t, tbl, collection, id, 0)
}

func (h *harness) readIn(t *testing.T, tbl *Table, collection, id string, part int) (map[string]string, int64) {
	t.Helper()
	doc, seq, err := h.s.Read(t.Context(), tbl, collection, id, part)
	require.NoError(t, err)
	return text(doc), seq
}

// text shows a document as field → JSON text, for readable diffs.
func text(d change.Doc) map[string]string {
	if d == nil {
		return nil
	}
	out := make(map[string]string, len(d))
	for k, v := range d {
		out[k] = string(v)
	}
	return out
}

func doc(fields map[string]string) change.Doc {
	d := change.Doc{}
	for k, v := range fields {
		d[k] = json.RawMessage(v)
	}
	return d
}

func put(seq int64, fields map[string]string) change.Change {
	return change.Change{Seq: seq, Kind: change.Put, Doc: doc(fields)}
}

func set(seq int64, fields map[string]string) change.Change {
	return change.Change{Seq: seq, Kind: change.Patch, Set: doc(fields)}
}

func unset(seq int64, fields ...string) change.Change {
	return change.Change{Seq: seq, Kind: change.Patch, Unset: fields}
}

func inc(seq int64, field, amount string) change.Change {
	return change.Change{Seq: seq, Kind: change.Patch, Inc: map[string]json.Number{field: json.Number(amount)}}
}

func del(seq int64) change.Change { return change.Change{Seq: seq, Kind: change.Delete} }

// incs returns changes from..to, each adding 1 to field, with seq = index.
func incs(field string, from, to int64) []change.Change {
	var out []change.Change
	for s := from; s <= to; s++ {
		out = append(out, inc(s, field, "1"))
	}
	return out
}
