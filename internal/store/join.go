package store

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/writeback/writeback/internal/sqlcheck"
)

// A batch of sessions runs their statements in order in one transaction.
// Consecutive executions of one statement text are sent as one statement
// where that changes the database exactly as running them one by one
// does: one statement for the database to parse, plan and execute instead
// of one per row — the set-based half of applying a batch.
//
//   - Single-row INSERTs (an order's lines, a log's entries; one session's
//     or several sessions' in a row) become one multi-row INSERT of their
//     rows in the same order. Only plain INSERT … VALUES of one row without
//     a clock in it join (sqlcheck.RowInsert).
//   - UPDATEs and DELETEs that pick rows by key columns equal to
//     placeholders (sqlcheck.KeyedWrite: an order's stock rows, a
//     delivery's orders) become one statement joining the table with a
//     list of their arguments, when their key arguments are integers,
//     pairwise distinct: they then touch disjoint rows, each from its own
//     arguments. A run with a repeated key is cut before the repetition.
//
// A table's statement-level triggers then fire once per joined statement,
// and row triggers in the order the database visits the rows. When a
// joined statement fails, the batch runs again unjoined, so that the error
// names the session and statement it belongs to, as it would have without
// joining.

// stmtRef names a statement of a batch: session index and statement index
// (roleStmt for the SET ROLE around a session's statements).
type stmtRef struct{ session, stmt int }

// batchStmt is one statement of a batch as it is sent: a session's own, or
// rows > 1 joined executions, ref the first of them.
type batchStmt struct {
	sql  string
	args []any
	ref  stmtRef
	rows int
}

// maxJoinedRows bounds a joined statement: every row count is a statement
// text of its own (a prepared statement per connection on PostgreSQL).
const maxJoinedRows = 64

// maxParams is PostgreSQL's limit of parameters per statement.
const maxParams = 65535

// errJoinedFailed says a joined statement failed: the batch is run again
// without joining, which names the statement at fault.
var errJoinedFailed = errors.New("store: a joined statement failed")

// paramTypes returns the PostgreSQL types of the placeholders of a
// statement text ($1 first), as names a cast takes; ok is false when they
// are not known.
type paramTypes func(sql string) (types []string, ok bool)

// joinRuns returns stmts with each run of consecutive executions of one
// text, with as many arguments each, joined where they may be (see
// above), up to maxJoinedRows rows and maxParams arguments a statement.
// types gives a keyed write's placeholder types on PostgreSQL (nil: none
// is joined there).
func joinRuns(d sqlcheck.Dialect, stmts []batchStmt, types paramTypes) []batchStmt {
	out := make([]batchStmt, 0, len(stmts))
	for i := 0; i < len(stmts); {
		first := stmts[i]
		j := i + 1
		for j < len(stmts) && j-i < maxJoinedRows && stmts[j].sql == first.sql &&
			len(stmts[j].args) == len(first.args) && (j-i+1)*len(first.args) <= maxParams {
			j++
		}
		if j-i == 1 {
			out = append(out, first)
			i = j
			continue
		}
		sh := shapeOf(d, first.sql)
		switch {
		case sh.insertOK:
			out = append(out, joined(sh.insert.Rows(j-i, len(first.args)), stmts[i:j]))
		case sh.keyedOK && (d == sqlcheck.MySQL || types != nil):
			out = joinKeyed(out, d, sh.keyed, stmts[i:j], types)
		default:
			out = append(out, stmts[i:j]...)
		}
		i = j
	}
	return out
}

// joined is the statement sql standing for run: their arguments one
// after another, named by the first.
func joined(sql string, run []batchStmt) batchStmt {
	st := batchStmt{sql: sql, ref: run[0].ref, rows: len(run), args: make([]any, 0, len(run)*len(run[0].args))}
	for _, s := range run {
		st.args = append(st.args, s.args...)
	}
	return st
}

// joinKeyed appends run, executions of the keyed write w, to out: joined
// in groups whose key arguments are distinct integers, an execution whose
// key is not an integer alone. On PostgreSQL types gives the placeholders'
// types, and the keys' must be integer types. On MySQL, whose joined rows
// are a derived table of literals, typed by MySQL from all of them, only
// executions whose arguments are all integers or NULL join: a decimal in
// exponent form would make a column DOUBLE, and a string would compare
// under another collation's rules than as a literal.
func joinKeyed(out []batchStmt, d sqlcheck.Dialect, w sqlcheck.KeyedWrite, run []batchStmt, types paramTypes) []batchStmt {
	params := len(run[0].args)
	keys := w.Keys()
	var ts []string
	if d == sqlcheck.Postgres {
		var ok bool
		ts, ok = types(run[0].sql)
		for _, k := range keys {
			ok = ok && k <= len(ts) && len(ts) == params && intTypes[ts[k-1]]
		}
		if !ok {
			return append(out, run...)
		}
	}
	var group []batchStmt
	var seen []string // the group's keys: a few dozen at most (maxJoinedRows)
	flush := func() {
		if len(group) == 1 {
			out = append(out, group[0])
		} else if len(group) > 1 {
			out = append(out, joined(w.Rows(len(group), params, ts), group))
		}
		group, seen = group[:0], seen[:0]
	}
	for _, s := range run {
		key, ok := keyTuple(s.args, keys)
		if ok && d == sqlcheck.MySQL {
			ok = integersOnly(s.args)
		}
		if !ok {
			flush()
			out = append(out, s)
			continue
		}
		if slices.Contains(seen, key) {
			flush()
		}
		group, seen = append(group, s), append(seen, key)
	}
	flush()
	return out
}

// integersOnly reports whether every argument is an integer or NULL (MySQL's
// arguments, see argValue).
func integersOnly(args []any) bool {
	for _, a := range args {
		switch a.(type) {
		case int64, nil:
		default:
			return false
		}
	}
	return true
}

// intTypes are the placeholder types whose values keyTuple compares.
var intTypes = map[string]bool{"int2": true, "int4": true, "int8": true}

// keyTuple returns the key arguments of an execution as one string of
// canonical integers; ok is false unless each is an integer: MySQL's
// int64, or PostgreSQL's text of one (see argValue). Two executions touch the
// same rows only if their tuples are equal: an integer column equals one
// value.
func keyTuple(args []any, keys []int) (string, bool) {
	b := make([]byte, 0, 8*len(keys))
	for _, k := range keys {
		if k > len(args) {
			return "", false // fewer arguments than placeholders: the store says so, unjoined
		}
		var n int64
		switch a := args[k-1].(type) {
		case int64: // MySQL
			n = a
		case string: // PostgreSQL
			var err error
			if n, err = strconv.ParseInt(strings.TrimSpace(a), 10, 64); err != nil {
				return "", false
			}
		default:
			return "", false
		}
		b = strconv.AppendInt(b, n, 10)
		b = append(b, ',')
	}
	return string(b), true
}

// shapes caches what a statement text is (sqlcheck.SingleRowInsert,
// sqlcheck.SingleKeyedWrite) by dialect and text: a family's statements
// are few texts, run again and again. Bounded: full, it starts over.
var shapes struct {
	sync.Mutex
	m map[string]shape
}

// shape is what a statement text is, for joining.
type shape struct {
	insert   sqlcheck.RowInsert
	insertOK bool
	keyed    sqlcheck.KeyedWrite
	keyedOK  bool
}

const maxShapes = 1024

func shapeOf(d sqlcheck.Dialect, sql string) shape {
	key := string(d) + "\x00" + sql
	shapes.Lock()
	sh, hit := shapes.m[key]
	shapes.Unlock()
	if hit {
		return sh
	}
	sh.insert, sh.insertOK = sqlcheck.SingleRowInsert(d, sql)
	if !sh.insertOK {
		sh.keyed, sh.keyedOK = sqlcheck.SingleKeyedWrite(d, sql)
	}
	shapes.Lock()
	if shapes.m == nil || len(shapes.m) >= maxShapes {
		shapes.m = map[string]shape{}
	}
	shapes.m[key] = sh
	shapes.Unlock()
	return sh
}
