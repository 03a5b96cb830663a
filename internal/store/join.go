package store

import (
	"errors"
	"sync"

	"github.com/writeback/writeback/internal/sqlcheck"
)

// A batch of sessions runs their statements in order in one transaction.
// Consecutive single-row INSERTs of one text (an order's lines, a log's
// entries; one session's or several sessions' in a row) change the
// database exactly as one INSERT of all their rows in the same order does,
// so the appliers send them so: one statement for the database to parse,
// plan and execute instead of one per row — the set-based half of applying
// a batch. Only plain INSERT … VALUES of one row without a clock in it
// join (sqlcheck.RowInsert); a table's statement-level triggers then fire
// once per joined statement. When a joined INSERT fails, the batch runs
// again unjoined, so that the error names the session and statement it
// belongs to, as it would have without joining.

// stmtRef names a statement of a batch: session index and statement index
// (roleStmt for the SET ROLE around a session's statements).
type stmtRef struct{ session, stmt int }

// batchStmt is one statement of a batch as it is sent: a session's own, or
// rows > 1 joined INSERTs, ref the first of them.
type batchStmt struct {
	sql  string
	args []any
	ref  stmtRef
	rows int
}

// maxJoinedRows bounds a joined INSERT: every row count is a statement
// text of its own (a prepared statement per connection on PostgreSQL).
const maxJoinedRows = 64

// maxParams is PostgreSQL's limit of parameters per statement.
const maxParams = 65535

// errJoinedFailed says a joined INSERT failed: the batch is run again
// without joining, which names the statement at fault.
var errJoinedFailed = errors.New("store: a joined INSERT failed")

// joinInserts returns stmts with each run of consecutive single-row
// INSERTs of one text, and as many arguments each, joined into one
// multi-row INSERT (up to maxJoinedRows rows and maxParams arguments).
func joinInserts(d sqlcheck.Dialect, stmts []batchStmt) []batchStmt {
	out := make([]batchStmt, 0, len(stmts))
	for i := 0; i < len(stmts); {
		first := stmts[i]
		j := i + 1
		for j < len(stmts) && j-i < maxJoinedRows && stmts[j].sql == first.sql &&
			len(stmts[j].args) == len(first.args) && (j-i+1)*len(first.args) <= maxParams {
			j++
		}
		r, ok := sqlcheck.RowInsert{}, false
		if j-i > 1 {
			r, ok = rowInsert(d, first.sql)
		}
		if !ok {
			out = append(out, stmts[i:j]...)
			i = j
			continue
		}
		joined := batchStmt{sql: r.Rows(j-i, len(first.args)), ref: first.ref, rows: j - i,
			args: make([]any, 0, (j-i)*len(first.args))}
		for _, s := range stmts[i:j] {
			joined.args = append(joined.args, s.args...)
		}
		out = append(out, joined)
		i = j
	}
	return out
}

// rowInserts caches sqlcheck.SingleRowInsert by dialect and text: a
// family's statements are few texts, run again and again. Bounded: full,
// it starts over.
var rowInserts struct {
	sync.Mutex
	m map[string]rowInsertResult
}

type rowInsertResult struct {
	r  sqlcheck.RowInsert
	ok bool
}

const maxRowInserts = 1024

func rowInsert(d sqlcheck.Dialect, sql string) (sqlcheck.RowInsert, bool) {
	key := string(d) + "\x00" + sql
	rowInserts.Lock()
	res, hit := rowInserts.m[key]
	rowInserts.Unlock()
	if hit {
		return res.r, res.ok
	}
	res.r, res.ok = sqlcheck.SingleRowInsert(d, sql)
	rowInserts.Lock()
	if rowInserts.m == nil || len(rowInserts.m) >= maxRowInserts {
		rowInserts.m = map[string]rowInsertResult{}
	}
	rowInserts.m[key] = res
	rowInserts.Unlock()
	return res.r, res.ok
}
