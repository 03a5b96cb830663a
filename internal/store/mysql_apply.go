package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/writeback/writeback/internal/change"
)

// Apply applies writes exactly once in one transaction. MySQL has no
// pipelining (and multiStatements stays off), so each statement is a round
// trip: START TRANSACTION; INSERT … ON DUPLICATE KEY UPDATE seq = seq of
// all records in (collection, id) order, which creates the missing ones
// and X-locks the others in that order; SELECT … FOR UPDATE of their seqs;
// the effects (one upsert per table for the puts — plus a SELECT and an
// INSERT if the table has another unique index —, one DELETE per table,
// per table with patches a SELECT … FOR UPDATE of the patched rows that
// exist, then one UPDATE per patch shape); one INSERT … ON DUPLICATE KEY
// UPDATE moving the seqs; COMMIT. A deadlock reruns the whole transaction.
func (s *myStore) Apply(ctx context.Context, writes []Write) ([]Result, error) {
	b, err := newApplyBatch(writes)
	if err != nil {
		return nil, err
	}
	if len(b.order) == 0 {
		return make([]Result, len(writes)), nil
	}
	return retryTx(myRetryable, func() ([]Result, error) { return s.applyOnce(ctx, b) })
}

func (s *myStore) applyOnce(ctx context.Context, b *applyBatch) ([]Result, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, wrapErr("apply: begin", err, myPermanent)
	}
	defer tx.Rollback() // after Commit, a no-op

	applied, err := myLockRecords(ctx, tx, b)
	if err != nil {
		return nil, wrapErr("apply: lock applied records", err, myPermanent)
	}
	plan, err := b.plan(myDialect{}, applied, func(t *Table, id string) (change.Doc, error) {
		q := lockRowQuery(myDialect{}, t, id)
		cells, err := myScanRow(tx.QueryRowContext(ctx, q.String(), q.args...).Scan, t)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		if err != nil {
			return nil, wrapErr("apply: read "+t.Name, err, myPermanent)
		}
		return buildDoc(t, cells)
	})
	if err != nil {
		return nil, err
	}
	for _, g := range plan.puts {
		qs, err := s.putQueries(ctx, tx, g)
		if err != nil {
			return nil, wrapErr("apply", err, myPermanent)
		}
		if err := myExec(ctx, tx, qs); err != nil {
			return nil, wrapErr("apply", err, myPermanent)
		}
	}
	if err := myExec(ctx, tx, plan.deletes); err != nil {
		return nil, wrapErr("apply", err, myPermanent)
	}
	if err := myPatch(ctx, tx, plan); err != nil {
		return nil, wrapErr("apply", err, myPermanent)
	}
	if len(plan.records) > 0 {
		q := newQuery(myDialect{}).add("INSERT INTO ", AppliedTable, " (collection, id, part, seq) VALUES ")
		for i, r := range plan.records {
			if i > 0 {
				q.add(", ")
			}
			q.add("(", q.arg(r.Collection), ", ", q.arg(r.ID), ", ", q.arg(int64(r.Partition)), ", ", q.arg(r.Seq), ")")
		}
		q.add(" ON DUPLICATE KEY UPDATE part = VALUES(part), seq = VALUES(seq)")
		if _, err := tx.ExecContext(ctx, q.String(), q.args...); err != nil {
			return nil, wrapErr("apply: update applied records", err, myPermanent)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, wrapErr("apply: commit", err, myPermanent)
	}
	return plan.results, nil
}

// putQueries returns the statements writing the rows of g. Into a table
// whose only unique index is the primary key, one upsert does. Otherwise
// (see myTableInfo.otherUnique) the rows that exist are upserted — the
// primary key is checked first, so the upsert updates the row itself and a
// collision in another unique index fails — and the others are plainly
// inserted, failing on a collision too.
func (s *myStore) putQueries(ctx context.Context, tx *sql.Tx, g *putGroup) ([]*query, error) {
	d := myDialect{}
	info, err := s.tableInfo(ctx, g.t)
	if err != nil {
		return nil, err
	}
	if !info.otherUnique {
		return putQueries(d, g.t, g.cols, g.rows, true), nil
	}
	exists, err := myExisting(ctx, tx, g.t, g.ids)
	if err != nil {
		return nil, err
	}
	var upserts, inserts [][]any
	for i, id := range g.ids {
		if exists[id] {
			upserts = append(upserts, g.rows[i])
		} else {
			inserts = append(inserts, g.rows[i])
		}
	}
	var out []*query
	if len(upserts) > 0 {
		out = append(out, putQueries(d, g.t, g.cols, upserts, true)...)
	}
	if len(inserts) > 0 {
		out = append(out, putQueries(d, g.t, g.cols, inserts, false)...)
	}
	return out, nil
}

// myLockRecords creates the missing records of b and locks them all in
// (collection, id) order, then reads their seqs.
func myLockRecords(ctx context.Context, tx *sql.Tx, b *applyBatch) (map[docKey]int64, error) {
	cols, ids, parts := b.keys()
	ins := newQuery(myDialect{}).add("INSERT INTO ", AppliedTable, " (collection, id, part, seq) VALUES ")
	sel := newQuery(myDialect{}).add("SELECT collection, id, seq FROM ", AppliedTable, " WHERE ")
	for i := range ids {
		if i > 0 {
			ins.add(", ")
			sel.add(" OR ")
		}
		ins.add("(", ins.arg(cols[i]), ", ", ins.arg(ids[i]), ", ", ins.arg(parts[i]), ", 0)")
		sel.add("(collection = ", sel.arg(cols[i]), " AND id = ", sel.arg(ids[i]), ")")
	}
	// Unlike INSERT IGNORE, which takes shared locks on the existing rows
	// and would have two appliers deadlock upgrading them, the no-op
	// update takes the exclusive lock at once.
	ins.add(" ON DUPLICATE KEY UPDATE seq = seq")
	sel.add(" ORDER BY collection, id FOR UPDATE")
	if _, err := tx.ExecContext(ctx, ins.String(), ins.args...); err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, sel.String(), sel.args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	applied := make(map[docKey]int64, len(ids))
	for rows.Next() {
		var k docKey
		var seq int64
		if err := rows.Scan(&k.collection, &k.id, &seq); err != nil {
			return nil, err
		}
		applied[k] = seq
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(applied) != len(ids) {
		return nil, fmt.Errorf("store: apply: locked %d applied records, expected %d", len(applied), len(ids))
	}
	return applied, nil
}

// myExec runs the statements in order.
func myExec(ctx context.Context, tx *sql.Tx, qs []*query) error {
	for _, q := range qs {
		if _, err := tx.ExecContext(ctx, q.String(), q.args...); err != nil {
			return err
		}
	}
	return nil
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

// myExisting returns which of the rows ids of t exist, locking them
// (SELECT … FOR UPDATE), so that they still exist when the statements
// that follow in the transaction write them.
func myExisting(ctx context.Context, tx *sql.Tx, t *Table, ids []string) (map[string]bool, error) {
	d := myDialect{}
	key := d.ident(t.Schema.Key)
	exists := make(map[string]bool, len(ids))
	for len(ids) > 0 {
		chunk := ids[:min(maxArgs, len(ids))]
		ids = ids[len(chunk):]
		q := newQuery(d).add("SELECT ", key, " FROM ", quoteTable(d, t.Name), " WHERE ", key, " IN (")
		for i, id := range chunk {
			a, err := myKeyArg(t, id)
			if err != nil {
				return nil, err
			}
			if i > 0 {
				q.add(", ")
			}
			q.add(q.arg(a))
		}
		q.add(") FOR UPDATE")
		rows, err := tx.QueryContext(ctx, q.String(), q.args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return nil, err
			}
			exists[k] = true
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return exists, nil
}

// myPatch runs the patch groups of plan. MySQL has no UPDATE … FROM nor
// UPDATE … RETURNING: per table, one locking read finds which patched rows
// exist (the others are Missing), then each group is one UPDATE joined
// with a derived table of its existing rows (per chunk: see chunkLen).
// The rows stay locked from the read on, so each UPDATE must find all of
// its rows; a count that disagrees is an error rather than a wrong Result.
// (An upsert, INSERT … ON DUPLICATE KEY UPDATE, would insert the missing
// rows a patch must not create, and fire on other unique indexes.)
func myPatch(ctx context.Context, tx *sql.Tx, plan *applyPlan) error {
	exists := map[string]map[string]bool{} // by table name
	for _, g := range plan.patches {
		ex, ok := exists[g.t.Name]
		if !ok {
			var ids []string
			for _, o := range plan.patches {
				if o.t.Name == g.t.Name {
					ids = append(ids, o.ids...)
				}
			}
			var err error
			if ex, err = myExisting(ctx, tx, g.t, ids); err != nil {
				return err
			}
			exists[g.t.Name] = ex
		}
		var rows [][]any // the key, then the row's values
		for r, id := range g.ids {
			if !ex[id] {
				plan.results[g.writes[r]].Missing = true
				continue
			}
			k, err := myKeyArg(g.t, id)
			if err != nil {
				return err
			}
			rows = append(rows, append([]any{k}, g.rows[r]...))
		}
		for len(rows) > 0 {
			n := chunkLen(rows)
			q := myPatchQuery(g, rows[:n])
			res, err := tx.ExecContext(ctx, q.String(), q.args...)
			if err != nil {
				return err
			}
			if got, err := res.RowsAffected(); err != nil || got != int64(n) {
				return errors.Join(err, fmt.Errorf("store: a patch of %s found %d of %d locked rows", g.t.Name, got, n))
			}
			rows = rows[n:]
		}
	}
	return nil
}

// myPatchQuery is the statement of a chunk of a patch group's rows (each
// the key, then the values of patchGroup.rows):
//
//	UPDATE t JOIN (SELECT ? AS k, ? AS v1, ? AS v2 UNION ALL SELECT ?, ?, ? …) AS v
//	ON t.key = v.k SET t.a = v.v1, t.n = COALESCE(t.n, 0) + v.v2
//
// The values are the per-row statement's literals: text for the values
// to set, which the server converts to the column's type on assignment,
// and numbers for the amounts.
func myPatchQuery(g *patchGroup, rows [][]any) *query {
	d := myDialect{}
	q := newQuery(d).add("UPDATE ", quoteTable(d, g.t.Name), " AS t JOIN (")
	for r, row := range rows {
		if r > 0 {
			q.add(" UNION ALL ")
		}
		q.add("SELECT ")
		for i, v := range row {
			if i > 0 {
				q.add(", ")
			}
			q.add(q.arg(v))
			if r == 0 {
				q.add(" AS ", myValueName(i))
			}
		}
	}
	q.add(") AS v ON t.", d.ident(g.t.Schema.Key), " = v.k SET ")
	in := func(col string) string { return "t." + col }
	setList(q, g.t, g.cols, in, in, func(i int, _ patchCol) string { return "v." + myValueName(i+1) })
	return q
}

// myValueName names the i-th column of a patch's derived table: k, v1, v2 …
func myValueName(i int) string {
	if i == 0 {
		return "k"
	}
	return "v" + strconv.Itoa(i)
}
