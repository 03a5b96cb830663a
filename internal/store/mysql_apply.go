package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/writeback/writeback/internal/change"
)

// Apply applies writes exactly once in one transaction, in two round trips
// (MySQL has no pipelining; the statements of each round trip go as one
// multi-statement packet, on a pool of Apply's own):
//
//  1. START TRANSACTION; INSERT … ON DUPLICATE KEY UPDATE seq = seq of all
//     records in (collection, id) order, which creates the missing ones and
//     X-locks the others in that order; SELECT … FOR UPDATE of their seqs
//     (MariaDB: RETURNING them from the insert);
//     per table, SELECT … FOR UPDATE of the batch's rows, which tells the
//     rows that exist (and keeps them so).
//  2. the effects — one upsert per table and column set for the puts (into
//     a table with another unique index: an upsert of the rows that exist
//     and an insert of the others), one DELETE per table, one UPDATE per
//     table and patch shape, of the rows that exist (the others are
//     Missing) —; one INSERT … ON DUPLICATE KEY UPDATE moving the seqs;
//     COMMIT.
//
// A patch with operators inside a JSON column reads its row in between.
//
// Usually no change of the batch was applied before and every row a patch
// names exists; Apply first sends the whole transaction as one packet
// planned on those assumptions, with statements that fail when one does
// not hold (applySingle); it takes the two round trips only then, or when
// a patch must read its row first, or a put goes into a table with
// another unique index.
//
// A deadlock reruns the whole transaction.
func (s *myStore) Apply(ctx context.Context, writes []Write) ([]Result, error) {
	return s.ApplyPlanned(ctx, Plan(writes))
}

// ApplyPlanned is Apply of a batch planned ahead (Planner).
func (s *myStore) ApplyPlanned(ctx context.Context, p *Planned) ([]Result, error) {
	return applyPlanned(p, myRetryable, func(b *applyBatch, first *applyPlan) ([]Result, error) {
		return s.applyOnce(ctx, b, first)
	})
}

// applyOnce runs one attempt; first is its first plan (firstPlan), nil
// when there is none: the records are read first.
func (s *myStore) applyOnce(ctx context.Context, b *applyBatch, first *applyPlan) (_ []Result, err error) {
	conn, err := s.applyDB.Conn(ctx)
	if err != nil {
		return nil, wrapErr("apply", err, myPermanent)
	}
	defer conn.Close()
	defer func() {
		if err != nil {
			myRollback(conn)
		}
	}()

	if first != nil {
		res, err := s.applySingle(ctx, conn, first, b)
		if !errors.Is(err, errBehind) {
			return res, err
		}
	}

	applied, exists, err := myLock(ctx, conn, b, s.returning)
	if err != nil {
		return nil, wrapErr("apply: lock applied records", err, myPermanent)
	}
	plan, err := b.plan(applied, func(t *Table, id string) (change.Doc, error) {
		q := lockRowQuery(myDialect{}, t, id)
		cells, err := myScanRow(conn.QueryRowContext(ctx, q.String(), q.args...).Scan, t)
		return lockedRow(t, cells, err, sql.ErrNoRows, myPermanent)
	})
	if err != nil {
		return nil, err
	}
	stmts, err := s.effects(ctx, plan, exists)
	if err != nil {
		return nil, wrapErr("apply", err, myPermanent)
	}
	switch {
	case b.cut:
		q := myFloorsQuery(b.floors(), floorLast, floorZero)
		q.add(" ON DUPLICATE KEY UPDATE seq = GREATEST(seq, VALUES(seq))")
		stmts = append(stmts, myStmt{q: q, rows: -1})
	case len(plan.records) > 0:
		q := myRecordsQuery(plan.records)
		q.add(" ON DUPLICATE KEY UPDATE part = VALUES(part), seq = VALUES(seq)")
		stmts = append(stmts, myStmt{q: q, rows: -1})
	}
	if err := myExecCommit(ctx, conn, stmts); err != nil {
		return nil, wrapErr("apply", err, myPermanent)
	}
	return plan.results, nil
}

// myRecordsQuery is the head of a statement writing the records:
// INSERT INTO the applied table … VALUES, one row per record at its seq.
func myRecordsQuery(records []AppliedRecord) *query {
	q := newQuery(myDialect{}).add("INSERT INTO ", AppliedTable, " (collection, id, part, seq) VALUES ")
	for i, r := range records {
		if i > 0 {
			q.add(", ")
		}
		q.add("(", q.arg(r.Collection), ", ", q.arg(r.ID), ", ", q.arg(int64(r.Partition)), ", ", q.arg(r.Seq), ")")
	}
	return q
}

// myStmt is a statement of Apply's second round trip and, for a patch
// group's, the row count it must report (-1: any).
type myStmt struct {
	q    *query
	rows int64
}

// effects returns the statements of plan's effects, in order: puts,
// deletes, patches. exists says which rows of the batch exist (see myLock);
// effects follows what the puts and deletes do to it, so that each patch
// statement names exactly the rows that exist when it runs. Without
// exists (applySingle), every put is an upsert and every patch statement
// names all its rows and is followed by myFoundCheck.
func (s *myStore) effects(ctx context.Context, plan *applyPlan, exists map[string]map[string]bool) ([]myStmt, error) {
	d := myDialect{}
	var out []myStmt
	add := func(qs ...*query) {
		for _, q := range qs {
			out = append(out, myStmt{q: q, rows: -1})
		}
	}
	for _, g := range plan.puts {
		info, err := s.tableInfo(ctx, g.t)
		if err != nil {
			return nil, err
		}
		ex := exists[g.t.Name]
		if exists == nil {
			if info.otherUnique {
				return nil, errBehind // its rows must be read first
			}
			add(putQueries(d, g.t, g.cols, g.rows, true)...)
			continue
		}
		if !info.otherUnique {
			add(putQueries(d, g.t, g.cols, g.rows, true)...)
		} else {
			// The rows that exist are upserted — the primary key is
			// checked first, so the upsert updates the row itself and a
			// collision in another unique index fails — and the others
			// are plainly inserted, failing on a collision too (see
			// myTableInfo.otherUnique).
			var upserts, inserts [][]any
			for i, id := range g.ids {
				if ex[id] {
					upserts = append(upserts, g.rows[i])
				} else {
					inserts = append(inserts, g.rows[i])
				}
			}
			if len(upserts) > 0 {
				add(putQueries(d, g.t, g.cols, upserts, true)...)
			}
			if len(inserts) > 0 {
				add(putQueries(d, g.t, g.cols, inserts, false)...)
			}
		}
		for _, id := range g.ids {
			ex[id] = true
		}
	}
	for _, g := range plan.deletes {
		add(g.queries(d)...)
		for _, id := range g.ids {
			delete(exists[g.t.Name], id.(string))
		}
	}
	for _, g := range plan.patches {
		var rows [][]any // the key, then the row's values
		for r, id := range g.ids {
			if exists != nil && !exists[g.t.Name][id] {
				plan.results[g.writes[r]].Missing = true
				continue
			}
			k, err := myKeyArg(g.t, id)
			if err != nil {
				return nil, err
			}
			rows = append(rows, append([]any{k}, g.rows[r]...))
		}
		for len(rows) > 0 {
			n := myPatchChunk(rows)
			out = append(out, myStmt{q: myPatchQuery(g, rows[:n]), rows: int64(n)})
			if exists == nil {
				out = append(out, myStmt{q: myFoundCheck(n), rows: -1})
			}
			rows = rows[n:]
		}
	}
	return out, nil
}

// myKeyArg is the argument comparing id with the key of t: an integer for
// an integer key, so that the rows a patch group's statement joins compare
// as integers with the key (as in a per-row WHERE key = 12).
func myKeyArg(t *Table, id string) (any, error) {
	if t.Schema.KeyType() != change.TypeInt {
		return id, nil
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return nil, permanentf("store: %s: id %q of an integer key", t.Name, id)
	}
	return n, nil
}

// myLock runs Apply's first round trip: it begins the transaction; a batch
// writing records creates its missing records and locks them all in
// (collection, id) order, reading their seqs (with returning, from the
// insert itself), then creates and locks its floors likewise, raising
// their recmax; a cut locks its floors and reads its records. Then it
// locks the rows of b's documents, returning which exist (by table name,
// then key). What is applied of each document is the higher of its
// record and its floor.
func myLock(ctx context.Context, conn *sql.Conn, b *applyBatch, returning bool) (map[docKey]int64, map[string]map[string]bool, error) {
	d := myDialect{}
	cols, ids, parts := b.keys()
	floors := b.floors()
	// records adds the statement reading the records; lock, locking them.
	records := func(q *query, lock bool) {
		q.add("SELECT collection, id, seq FROM ", AppliedTable, " WHERE ")
		for i := range ids {
			if i > 0 {
				q.add(" OR ")
			}
			q.add("(collection = ", q.arg(cols[i]), " AND id = ", q.arg(ids[i]), ")")
		}
		if lock {
			q.add(" ORDER BY collection, id FOR UPDATE")
		}
	}
	q := newQuery(d).grow(3 * len(ids)).add("START TRANSACTION; ")
	if !b.cut {
		q.add("INSERT INTO ", AppliedTable, " (collection, id, part, seq) VALUES ")
		for i := range ids {
			if i > 0 {
				q.add(", ")
			}
			q.add("(", q.arg(cols[i]), ", ", q.arg(ids[i]), ", ", q.arg(parts[i]), ", 0)")
		}
		// Unlike INSERT IGNORE, which takes shared locks on the existing rows
		// and would have two appliers deadlock upgrading them, the no-op
		// update takes the exclusive lock at once.
		q.add(" ON DUPLICATE KEY UPDATE seq = seq")
		if returning {
			// The rows as the no-op update left them: the latest seqs,
			// which the lock protects.
			q.add(" RETURNING collection, id, seq; ")
		} else {
			q.add("; ")
			records(q, true)
			q.add("; ")
		}
	}
	raise := floorLast
	if b.cut {
		raise = floorZero
	}
	myAddFloors(q, floors, floorZero, raise).add(" ON DUPLICATE KEY UPDATE recmax = GREATEST(recmax, VALUES(recmax))")
	if returning {
		q.add(" RETURNING collection, part, seq")
	} else {
		q.add("; SELECT collection, part, seq FROM ", FloorsTable, " WHERE ")
		for i, f := range floors {
			if i > 0 {
				q.add(" OR ")
			}
			q.add("(collection = ", q.arg(f.collection), " AND part = ", q.arg(int64(f.part)), ")")
		}
		q.add(" ORDER BY collection, part FOR UPDATE")
	}
	if b.cut {
		q.add("; ")
		records(q, false)
	}
	// The rows, per table in order of appearance, in chunks.
	var tables []*Table
	keys := map[string][]string{}
	for _, i := range b.order {
		w := &b.writes[i]
		if _, ok := keys[w.Table.Name]; !ok {
			tables = append(tables, w.Table)
		}
		keys[w.Table.Name] = append(keys[w.Table.Name], w.ID)
	}
	var chunks []*Table // the table of each SELECT of rows
	for _, t := range tables {
		key := d.ident(t.Schema.Key)
		for tids := keys[t.Name]; len(tids) > 0; {
			chunk := tids[:min(maxArgs, len(tids))]
			tids = tids[len(chunk):]
			chunks = append(chunks, t)
			args := make([]any, len(chunk))
			for i, id := range chunk {
				var err error
				if args[i], err = myKeyArg(t, id); err != nil {
					return nil, nil, err
				}
			}
			q.add("; SELECT ", key, " FROM ", quoteTable(d, t.Name), " WHERE ", key, " IN (")
			q.list(len(args), func(i int) { q.add(q.arg(args[i])) }).add(") FOR UPDATE")
		}
	}
	rows, err := conn.QueryContext(ctx, q.String(), q.args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	// next moves to the next result set but for the first one.
	first := true
	next := func() error {
		if first {
			first = false
			return nil
		}
		if !rows.NextResultSet() {
			return errors.Join(rows.Err(), errors.New("store: apply: fewer results than statements"))
		}
		return nil
	}
	recs := make(map[docKey]int64, len(ids))
	readRecords := func() error {
		if err := next(); err != nil {
			return err
		}
		for rows.Next() {
			var k docKey
			var seq int64
			if err := rows.Scan(&k.collection, &k.id, &seq); err != nil {
				return err
			}
			recs[k] = seq
		}
		return rows.Err()
	}
	if !b.cut {
		if err := readRecords(); err != nil {
			return nil, nil, err
		}
		if len(recs) != len(ids) {
			return nil, nil, fmt.Errorf("store: apply: locked %d applied records, expected %d", len(recs), len(ids))
		}
	}
	if err := next(); err != nil {
		return nil, nil, err
	}
	locked := make(map[floorKey]int64, len(floors))
	for rows.Next() {
		var k floorKey
		var seq int64
		if err := rows.Scan(&k.collection, &k.part, &seq); err != nil {
			return nil, nil, err
		}
		locked[k] = seq
	}
	if len(locked) != len(floors) {
		return nil, nil, errors.Join(rows.Err(), fmt.Errorf("store: apply: locked %d floors, expected %d", len(locked), len(floors)))
	}
	if b.cut {
		if err := readRecords(); err != nil {
			return nil, nil, err
		}
	}
	exists := make(map[string]map[string]bool, len(tables))
	for _, t := range tables {
		exists[t.Name] = map[string]bool{}
	}
	for _, t := range chunks {
		if !rows.NextResultSet() {
			return nil, nil, errors.Join(rows.Err(), errors.New("store: apply: fewer results than statements"))
		}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return nil, nil, err
			}
			exists[t.Name][k] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return b.withFloors(recs, locked), exists, nil
}

// myExecCommit runs the statements and COMMIT in as few round trips as the
// packet size allows (maxPacketBytes), checking each one's row count.
func myExecCommit(ctx context.Context, conn *sql.Conn, stmts []myStmt) error {
	commit := myStmt{q: newQuery(myDialect{}).add("COMMIT"), rows: -1}
	stmts = append(stmts, commit)
	for len(stmts) > 0 {
		n, size := 0, 0
		for n < len(stmts) && (n == 0 || size+stmtBytes(stmts[n].q) <= maxPacketBytes) {
			size += stmtBytes(stmts[n].q)
			n++
		}
		if err := myExecPacket(ctx, conn, stmts[:n]); err != nil {
			return err
		}
		stmts = stmts[n:]
	}
	return nil
}

// maxPacketBytes bounds the statements sent in one packet, below
// max_allowed_packet (see maxStmtBytes).
const maxPacketBytes = 2 * maxStmtBytes

// stmtBytes estimates the size of q once its values are interpolated.
func stmtBytes(q *query) int {
	n := q.sb.Len()
	for _, v := range q.args {
		n += argBytes(v)
	}
	return n
}

// myExecPacket sends stmts as one multi-statement packet. The driver's
// Result counts the rows of each (through database/sql, only the last's).
func myExecPacket(ctx context.Context, conn *sql.Conn, stmts []myStmt) error {
	// Sized first: a batch's packet holds hundreds of arguments.
	size, n := 0, 0
	for _, st := range stmts {
		size, n = size+st.q.sb.Len()+2, n+len(st.q.args)
	}
	var text strings.Builder
	text.Grow(size)
	args := make([]driver.NamedValue, 0, n)
	for i, st := range stmts {
		if i > 0 {
			text.WriteString("; ")
		}
		text.WriteString(st.q.String())
		for _, a := range st.q.args {
			args = append(args, driver.NamedValue{Ordinal: len(args) + 1, Value: a})
		}
	}
	return conn.Raw(func(dc any) error {
		res, err := dc.(driver.ExecerContext).ExecContext(ctx, text.String(), args)
		if err != nil {
			return err
		}
		counts := res.(mysql.Result).AllRowsAffected()
		if len(counts) != len(stmts) {
			return fmt.Errorf("store: apply: %d results for %d statements", len(counts), len(stmts))
		}
		for i, st := range stmts {
			// The rows of a patch group were locked by the first round
			// trip: its statement finds each of them, short of a bug.
			// (Should one surface in the packet that commits, the error
			// still stands: a retry skips what was committed.)
			if st.rows >= 0 && counts[i] != st.rows {
				return fmt.Errorf("store: apply: a patch found %d of its %d rows", counts[i], st.rows)
			}
		}
		return nil
	})
}

// myRollback ends the transaction a failed Apply left open; a connection
// that cannot is discarded rather than returned to the pool inside it.
func myRollback(conn *sql.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// myPatchQuery is the statement of a chunk of a patch group's rows (each
// the key, then the values of patchGroup.rows), each value picked by the
// row's key:
//
//	UPDATE t SET t.a = CASE t.key WHEN ? THEN ? WHEN ? THEN ? END,
//	  t.n = COALESCE(t.n, 0) + CASE t.key WHEN ? THEN ? … END
//	WHERE t.key IN (?, ?)
//
// The values are the per-row statement's literals: text for the values
// to set, which the server converts to the column's type on assignment,
// and numbers for the amounts. The server compares a CASE's key with its
// WHENs one by one, so a statement holds at most myPatchRows rows. (Joined
// with its rows as a derived table instead — UPDATE t JOIN (SELECT ? AS k,
// ? AS v1 UNION ALL SELECT …) — a statement costs MariaDB 300–400 µs of
// CPU before its first row, which YCSB's one-field updates, ten patch
// shapes of ten rows in a batch, paid for every row.)
func myPatchQuery(g *patchGroup, rows [][]any) *query {
	d := myDialect{}
	key := "t." + d.ident(g.t.Schema.Key)
	q := newQuery(d).add("UPDATE ", quoteTable(d, g.t.Name), " AS t SET ")
	if len(rows) > 0 {
		q.grow(len(rows) * 2 * len(rows[0])) // per row its key once per value and once in the IN list
	}
	in := func(col string) string { return "t." + col }
	// A value's CASE registers its arguments before setList writes the
	// assignment's left side, which has none: their order stays the text's.
	setList(q, g.t, g.cols, in, in, func(i int, _ patchCol) string {
		var c strings.Builder
		c.WriteString("CASE ")
		c.WriteString(key)
		for _, row := range rows {
			c.WriteString(" WHEN ")
			c.WriteString(q.arg(row[0]))
			c.WriteString(" THEN ")
			c.WriteString(q.arg(row[i+1]))
		}
		c.WriteString(" END")
		return c.String()
	})
	q.add(" WHERE ", key, " IN (")
	return q.list(len(rows), func(r int) { q.add(q.arg(rows[r][0])) }).add(")")
}

// myPatchRows bounds the rows of a patch statement (myPatchQuery).
const myPatchRows = 128

// myPatchChunk is how many of rows (as myPatchQuery takes them) its next
// statement holds: at most myPatchRows, and within maxStmtBytes counting
// the key once per value and once in the IN list.
func myPatchChunk(rows [][]any) int {
	n := min(len(rows), myPatchRows)
	size := 0
	for i, row := range rows[:n] {
		size += argBytes(row[0]) * len(row)
		for _, v := range row[1:] {
			size += argBytes(v)
		}
		if i > 0 && size > maxStmtBytes {
			return i
		}
	}
	return n
}
