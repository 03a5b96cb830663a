package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/writeback/writeback/internal/change"
)

// The record statements of Apply take the batch's documents as arrays in
// lock order. WITH ORDINALITY … ORDER BY keeps that order for the inserts:
// an insert waits for a concurrent insert of the same key, so inserting in
// the common order matters as much as locking in it.
const (
	pgInsertRecordsSQL = `INSERT INTO ` + AppliedTable + ` (collection, id, part, seq)
SELECT u.c, u.i, u.p, 0 FROM unnest($1::text[], $2::text[], $3::int8[]) WITH ORDINALITY AS u(c, i, p, n)
ORDER BY u.n
ON CONFLICT (collection, id) DO NOTHING`
	// FOR UPDATE in READ COMMITTED returns the latest committed version of
	// a row it had to wait for: the seq the previous applier committed. The
	// rows are locked as they leave the sort, in key order.
	pgLockRecordsSQL = `SELECT a.collection, a.id, a.seq FROM ` + AppliedTable + ` AS a
JOIN unnest($1::text[], $2::text[]) AS u(c, i) ON a.collection = u.c AND a.id = u.i
ORDER BY a.collection, a.id
FOR UPDATE OF a`
	pgUpdateRecordsSQL = `UPDATE ` + AppliedTable + ` AS a SET part = u.p, seq = u.s
FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[]) AS u(c, i, p, s)
WHERE a.collection = u.c AND a.id = u.i`
)

// The floor statements take the batch's (collection, partition) pairs as
// arrays in lock order (applyBatch.floors), and the single round trip's
// their pairs' first changes as a JSON object {collection: {partition:
// first seq}} (pgFloorFirsts), which the check looks up by key.
const (
	// pgCutFloorsSQL is a cut's single round trip's statement in place of
	// the records': it moves each floor to the pair's last change in the
	// batch, provided neither the floor nor a record of the pair
	// (recmax) reached its first change — else it fails (division by
	// zero), as pgWriteRecordsSQL does.
	pgCutFloorsSQL = `INSERT INTO ` + FloorsTable + ` AS f (collection, part, seq, recmax)
	SELECT u.c, u.p, u.l, 0 FROM unnest($1::text[], $2::int8[], $3::int8[]) WITH ORDINALITY AS u(c, p, l, n)
	ORDER BY u.n
	ON CONFLICT (collection, part) DO UPDATE SET
		seq = CASE WHEN GREATEST(f.seq, f.recmax) < ($4::jsonb -> f.collection ->> f.part::text)::int8
			THEN EXCLUDED.seq ELSE EXCLUDED.seq / 0 END`
	// pgRecordFloorsSQL follows the records' statement of the single round
	// trip of a batch that writes records: it raises each pair's recmax to
	// the pair's last change in the batch, provided no cut's floor reached
	// its first change — else it fails.
	pgRecordFloorsSQL = `INSERT INTO ` + FloorsTable + ` AS f (collection, part, seq, recmax)
	SELECT u.c, u.p, 0, u.l FROM unnest($1::text[], $2::int8[], $3::int8[]) WITH ORDINALITY AS u(c, p, l, n)
	ORDER BY u.n
	ON CONFLICT (collection, part) DO UPDATE SET
		recmax = CASE WHEN f.seq < ($4::jsonb -> f.collection ->> f.part::text)::int8
			THEN GREATEST(f.recmax, EXCLUDED.recmax) ELSE EXCLUDED.recmax / 0 END`
	// pgLockFloorsSQL locks the floors in the two round trips' first one
	// (creating the missing ones at 0), raising recmax to $3 (a batch
	// writing records: its pairs' last changes; a cut: 0), and returns the
	// floors.
	pgLockFloorsSQL = `INSERT INTO ` + FloorsTable + ` AS f (collection, part, seq, recmax)
	SELECT u.c, u.p, 0, u.r FROM unnest($1::text[], $2::int8[], $3::int8[]) WITH ORDINALITY AS u(c, p, r, n)
	ORDER BY u.n
	ON CONFLICT (collection, part) DO UPDATE SET recmax = GREATEST(f.recmax, EXCLUDED.recmax)
	RETURNING f.collection, f.part, f.seq`
	// pgReadRecordsSQL reads a cut's records, unlocked: the cut holds its
	// floors, which every apply writing records locks before it commits.
	pgReadRecordsSQL = `SELECT a.collection, a.id, a.seq FROM ` + AppliedTable + ` AS a
JOIN unnest($1::text[], $2::text[]) AS u(c, i) ON a.collection = u.c AND a.id = u.i`
	// pgMoveFloorsSQL moves a cut's floors in the two round trips' second.
	pgMoveFloorsSQL = `UPDATE ` + FloorsTable + ` AS f SET seq = GREATEST(f.seq, u.l)
FROM unnest($1::text[], $2::int8[], $3::int8[]) AS u(c, p, l)
WHERE f.collection = u.c AND f.part = u.p`
)

// pgFloorFirsts is the floor checks' JSON argument: each pair's first
// change.
func pgFloorFirsts(fs []floor) (string, error) {
	firsts := map[string]map[string]int64{}
	for _, f := range fs {
		if firsts[f.collection] == nil {
			firsts[f.collection] = map[string]int64{}
		}
		firsts[f.collection][strconv.Itoa(f.part)] = f.first
	}
	b, err := json.Marshal(firsts)
	return string(b), err
}

// Apply applies writes exactly once in one transaction, in one round trip
// when it can and two when it must:
//
//	batch 1: BEGIN; insert the missing records (seq 0); lock them all
//	         FOR UPDATE in (collection, id) order, reading their seqs
//	batch 2: the effect statements (one DELETE per table, one UPDATE per
//	         table and patch shape, one upsert per table and column set for
//	         the puts); move the records' seqs; COMMIT
//
// Usually no change of the batch was applied before (replays follow only
// crashes and takeovers), and then the effects do not depend on the seqs
// batch 1 reads: Apply first sends one batch, planned as if every record's
// seq were below its write's first change — BEGIN; write the records
// (create the missing ones, lock the others, check that assumption and
// move them to their last seqs) in one statement (pgWriteRecordsSQL); the
// effects; COMMIT — and the check aborts the transaction if the
// assumption is wrong (errBehind).
// Only then, or when a patch must read its row first (operators inside
// JSON columns), does it take the two round trips.
//
// A deadlock or serialization failure reruns the whole transaction.
func (s *pgStore) Apply(ctx context.Context, writes []Write) ([]Result, error) {
	return s.ApplyPlanned(ctx, Plan(writes))
}

// ApplyPlanned is Apply of a batch planned ahead (Planner).
func (s *pgStore) ApplyPlanned(ctx context.Context, p *Planned) ([]Result, error) {
	return applyPlanned(p, pgRetryable, func(b *applyBatch, first *applyPlan) ([]Result, error) {
		return s.applyOnce(ctx, b, first)
	})
}

// errBehind says that a record of the batch is not behind its write's
// first change, so the single-round-trip plan does not hold; errNeedsRow,
// that a patch needs its row read first.
var (
	errBehind   = errors.New("store: apply: a change of the batch was applied before")
	errNeedsRow = errors.New("store: apply: a patch reads its row")
)

// pgWriteRecordsSQL is the single round trip's record statement: one
// upsert that creates the missing records at their writes' last seq and
// moves the others there, provided each one's seq is below its write's
// first change; a record that is not fails the statement (division by
// zero, the ELSE): only then does the plan hold. The check sits in the SET
// rather than in a WHERE whose skipped rows a count of RETURNING would
// tell: that costs a CTE, a row returned per record and the count
// (BenchmarkDrain). The upsert takes the rows in the order of the arrays,
// which is lock order (WITH ORDINALITY … ORDER BY, as in
// pgInsertRecordsSQL): it waits for a concurrent insert of a key as for a
// locked row, and ON CONFLICT DO UPDATE locks the row it conflicts with
// and, in READ COMMITTED, computes the SET from the latest committed
// version of it — the seq the previous applier committed. The first change
// of a write of one change is its last (EXCLUDED.seq); those of the writes
// of several come in $5, a JSON object {collection: {id: first seq}}
// (pgFirsts), which the check looks up by key: a binary search, where a
// search of arrays was a scan of them per conflicting record — 2.0 ms
// against 0.7 for 128 records of which 100 had several changes, and
// writes of several changes are the usual case once documents wait
// (writeback.applyDelay).
const pgWriteRecordsSQL = `INSERT INTO ` + AppliedTable + ` AS a (collection, id, part, seq)
	SELECT u.c, u.i, u.p, u.s
	FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[]) WITH ORDINALITY AS u(c, i, p, s, n)
	ORDER BY u.n
	ON CONFLICT (collection, id) DO UPDATE SET part = EXCLUDED.part,
		seq = CASE WHEN a.seq < COALESCE(($5::jsonb -> a.collection ->> a.id)::int8, EXCLUDED.seq)
			THEN EXCLUDED.seq ELSE EXCLUDED.seq / 0 END`

// pgFirsts is pgWriteRecordsSQL's $5: the first change's seq of each of
// b's writes of several changes, by collection and id; nil when there are
// none.
func pgFirsts(b *applyBatch) ([]byte, error) {
	var firsts map[string]map[string]int64
	for _, i := range b.order {
		w := &b.writes[i]
		if len(w.Changes) < 2 {
			continue
		}
		if firsts == nil {
			firsts = map[string]map[string]int64{}
		}
		if firsts[w.Collection] == nil {
			firsts[w.Collection] = map[string]int64{}
		}
		firsts[w.Collection][w.ID] = w.Changes[0].Seq
	}
	if firsts == nil {
		return nil, nil
	}
	return json.Marshal(firsts)
}

// pgWriteOnesRecordsSQL is pgWriteRecordsSQL for a batch whose writes have
// one change each, the usual case: the first change is the last, so the
// check needs no search of the first changes' arrays (a subquery per
// conflicting record).
const pgWriteOnesRecordsSQL = `INSERT INTO ` + AppliedTable + ` AS a (collection, id, part, seq)
	SELECT u.c, u.i, u.p, u.s
	FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[]) WITH ORDINALITY AS u(c, i, p, s, n)
	ORDER BY u.n
	ON CONFLICT (collection, id) DO UPDATE SET part = EXCLUDED.part,
		seq = CASE WHEN a.seq < EXCLUDED.seq THEN EXCLUDED.seq ELSE EXCLUDED.seq / 0 END`

// applyOnce runs one attempt; first is its first plan (firstPlan), nil
// when there is none: the records are read first.
func (s *pgStore) applyOnce(ctx context.Context, b *applyBatch, first *applyPlan) (_ []Result, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, wrapErr("apply", err, pgPermanent)
	}
	// Release destroys a connection left inside a transaction; the
	// rollback below lets the pool keep it.
	defer conn.Release()
	defer func() {
		if err != nil {
			pgRollback(conn.Conn())
		}
	}()

	if first != nil {
		res, err := s.applyPlan(ctx, conn.Conn(), first, b, true)
		if !errors.Is(err, errBehind) {
			return res, err
		}
	}

	applied, err := pgLock(ctx, conn.Conn(), b)
	if err != nil {
		return nil, wrapErr("apply: lock applied records", err, pgPermanent)
	}
	plan, err := b.plan(applied, func(t *Table, id string) (change.Doc, error) {
		q := lockRowQuery(pgDialect{}, t, id)
		cells, err := pgScanRow(conn.Conn().QueryRow(ctx, q.String(), q.args...), t)
		return lockedRow(t, cells, err, pgx.ErrNoRows, pgPermanent)
	})
	if err != nil {
		return nil, err
	}
	return s.applyPlan(ctx, conn.Conn(), plan, b, false)
}

// applyPlan sends the effect statements of plan, moves the records (a
// cut: the floors) and commits, in one round trip. With single set, the
// batch begins with the single round trip's statements (BEGIN, then
// pgWriteRecordsSQL and pgRecordFloorsSQL, or a cut's pgCutFloorsSQL),
// which check that the plan holds; if it does not, the transaction is
// rolled back and errBehind returned. Without it, the transaction is the
// one pgLock began.
func (s *pgStore) applyPlan(ctx context.Context, conn *pgx.Conn, plan *applyPlan, b *applyBatch, single bool) ([]Result, error) {
	casts := make([]map[string]string, len(plan.patches))
	for i, g := range plan.patches {
		var err error
		if casts[i], err = s.casts(ctx, conn, g.t); err != nil {
			return nil, wrapErr("apply: describe "+g.t.Name, err, pgPermanent)
		}
	}
	cols, ids := make([]string, 0, len(plan.records)), make([]string, 0, len(plan.records))
	parts, seqs := make([]int64, 0, len(plan.records)), make([]int64, 0, len(plan.records))
	for _, r := range plan.records {
		cols, ids = append(cols, r.Collection), append(ids, r.ID)
		parts, seqs = append(parts, int64(r.Partition)), append(seqs, r.Seq)
	}
	floors := b.floors()
	fcols, fparts, flasts := floorArrays(floors)
	batch := &pgx.Batch{}
	checks := 0 // the single round trip's statements after BEGIN
	if single {
		ffirsts, err := pgFloorFirsts(floors)
		if err != nil {
			return nil, fmt.Errorf("store: apply: %w", err)
		}
		batch.Queue("BEGIN ISOLATION LEVEL READ COMMITTED") // see pgLock
		if b.cut {
			batch.Queue(pgCutFloorsSQL, fcols, fparts, flasts, ffirsts)
			checks = 1
		} else {
			// Every write applies whole (the plan assumed so): the
			// records are the batch's documents in lock order.
			firsts, err := pgFirsts(b)
			if err != nil {
				return nil, fmt.Errorf("store: apply: %w", err)
			}
			if firsts == nil {
				batch.Queue(pgWriteOnesRecordsSQL, cols, ids, parts, seqs)
			} else {
				batch.Queue(pgWriteRecordsSQL, cols, ids, parts, seqs, string(firsts))
			}
			batch.Queue(pgRecordFloorsSQL, fcols, fparts, flasts, ffirsts)
			checks = 2
		}
	}
	var deletes []*query
	for _, g := range plan.deletes {
		deletes = append(deletes, g.queries(pgDialect{})...)
	}
	for _, q := range deletes {
		batch.Queue(q.String(), q.args...)
	}
	for i, g := range plan.patches {
		q, err := pgPatchQuery(g, casts[i])
		if err != nil {
			return nil, err
		}
		batch.Queue(q.String(), q.args...)
	}
	// ON CONFLICT (key) fires on the primary key only: a put that breaks
	// another unique constraint fails, as it should.
	var puts []*query
	for _, g := range plan.puts {
		puts = append(puts, putQueries(pgDialect{}, g.t, g.cols, g.rows, true)...)
	}
	for _, q := range puts {
		batch.Queue(q.String(), q.args...)
	}
	moves := 0 // the records' or floors' statement of the two round trips
	switch {
	case single:
	case b.cut:
		batch.Queue(pgMoveFloorsSQL, fcols, fparts, flasts)
		moves = 1
	case len(plan.records) > 0:
		batch.Queue(pgUpdateRecordsSQL, cols, ids, parts, seqs)
		moves = 1
	}
	batch.Queue("COMMIT")
	br := conn.SendBatch(ctx, batch)
	defer br.Close()
	if single {
		if _, err := br.Exec(); err != nil { // BEGIN
			return nil, wrapErr("apply: begin", err, pgPermanent)
		}
	}
	for range checks {
		if _, err := br.Exec(); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "22012" { // division_by_zero
				// The server skipped the rest of the batch, COMMIT
				// included: the transaction is left failed.
				_ = br.Close()
				if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
					return nil, wrapErr("apply: rollback", err, pgPermanent)
				}
				return nil, errBehind
			}
			return nil, wrapErr("apply: lock applied records", err, pgPermanent)
		}
	}
	for range deletes {
		if _, err := br.Exec(); err != nil {
			return nil, wrapErr("apply", err, pgPermanent)
		}
	}
	var short []int // the patch groups that found fewer rows than they name
	for i, g := range plan.patches {
		tag, err := br.Exec()
		if err != nil {
			return nil, wrapErr("apply", err, pgPermanent)
		}
		if tag.RowsAffected() < int64(len(g.ids)) {
			short = append(short, i)
		}
	}
	for range puts {
		if _, err := br.Exec(); err != nil {
			return nil, wrapErr("apply", err, pgPermanent)
		}
	}
	for range moves {
		if _, err := br.Exec(); err != nil {
			return nil, wrapErr("apply: update applied records", err, pgPermanent)
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return nil, wrapErr("apply: commit", err, pgPermanent)
	}
	// COMMIT of a transaction that failed answers ROLLBACK, not an error.
	if tag.String() != "COMMIT" {
		return nil, &Error{Err: errors.New("store: apply: the transaction was rolled back at commit")}
	}
	if err := br.Close(); err != nil {
		return nil, wrapErr("apply: commit", err, pgPermanent)
	}
	// Committed: Missing only names, in the applier's log, rows a patch did
	// not find, so failing to look them up (a deadline, a dropped
	// connection) must not fail the batch.
	for _, i := range short {
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = pgMarkMissing(mctx, conn, plan.patches[i], casts[i], plan.results)
		cancel()
	}
	return plan.results, nil
}

// pgPatchQuery is the one statement of a patch group: an UPDATE joined
// with the group's rows, sent as one array per value column. Its row count
// tells whether it found every row (see pgMarkMissing).
//
//	UPDATE t SET a = v.v1::<a's type>, n = COALESCE(t.n, 0) + v.v2
//	FROM unnest($1::text[], $2::text[], $3::int8[]) AS v(k, v1, v2)
//	WHERE t.key = v.k::<key's type>
//
// Values to set travel as text, as in every other statement of the store,
// and the typed cast does what inferring an untyped parameter's type from
// its column does for those: the type's input function parses the text,
// and the assignment applies the column's type modifier (length, scale).
// Amounts travel as int8 or float8 arrays, the types of the per-row
// statement's amounts, so that the database adds exactly as it did.
func pgPatchQuery(g *patchGroup, casts map[string]string) (*query, error) {
	d := pgDialect{}
	keyType := pgKeyCast(g.t, casts)
	for _, c := range append([]string{g.t.Schema.Key}, colNames(g.cols)...) {
		if casts[c] == "" {
			return nil, fmt.Errorf("store: %s has no column %q in the database", g.t.Name, c)
		}
	}
	// One array per value: the keys, then per column its value or its
	// amounts (see patchGroup.rows).
	arrays, types := []any{g.ids}, []string{"text[]"}
	for _, pc := range g.cols {
		for range max(1, pc.amounts) {
			i := len(arrays) - 1 // the value's index in a row
			switch {
			case pc.amounts == 0:
				vals := make([]*string, len(g.rows))
				for r, row := range g.rows {
					if v, ok := row[i].(string); ok {
						vals[r] = &v
					}
				}
				arrays, types = append(arrays, vals), append(types, "text[]")
			case pc.c.Type == change.TypeFloat:
				arrays, types = append(arrays, column[float64](g.rows, i)), append(types, "float8[]")
			default:
				arrays, types = append(arrays, column[int64](g.rows, i)), append(types, "int8[]")
			}
		}
	}
	names := make([]string, len(arrays))
	names[0] = "k"
	for i := 1; i < len(names); i++ {
		names[i] = "v" + strconv.Itoa(i)
	}
	q := newQuery(d).add("UPDATE ", quoteTable(d, g.t.Name), " AS t SET ")
	setList(q, g.t, g.cols,
		func(col string) string { return "t." + col },
		func(col string) string { return col },
		func(i int, pc patchCol) string {
			if pc.amounts > 0 {
				return "v." + names[i+1]
			}
			return "v." + names[i+1] + "::" + casts[pc.c.Name]
		})
	q.add(" FROM unnest(")
	for i, a := range arrays {
		if i > 0 {
			q.add(", ")
		}
		q.add(q.arg(a), "::", types[i])
	}
	q.add(") AS v(", strings.Join(names, ", "), ") WHERE t.", d.ident(g.t.Schema.Key), " = v.k::", keyType)
	return q, nil
}

// pgKeyCast is the type a patch group's statement casts its keys to:
// int8 for an integer key, as keyParam (an id beyond an int4 key's range
// finds no row), else the key column's own.
func pgKeyCast(t *Table, casts map[string]string) string {
	if t.Schema.KeyType() == change.TypeInt {
		return "int8"
	}
	return casts[t.Schema.Key]
}

// column returns the i-th value of each row.
func column[T any](rows [][]any, i int) []T {
	out := make([]T, len(rows))
	for r, row := range rows {
		out[r] = row[i].(T)
	}
	return out
}

func colNames(cols []patchCol) []string {
	out := make([]string, len(cols))
	for i, pc := range cols {
		out[i] = pc.c.Name
	}
	return out
}

// pgMarkMissing marks Missing the rows of a patch group that its
// statement did not find (its row count was short): those of its keys
// that name no row, read after the commit. A patch of a missing row changes
// nothing, and Missing only says so in the applier's log: a row inserted
// in between, whose patch found nothing, is not reported.
func pgMarkMissing(ctx context.Context, conn *pgx.Conn, g *patchGroup, casts map[string]string, results []Result) error {
	d := pgDialect{}
	// The join of the patch statement, negated: the keys naming no row.
	q := "SELECT v.k FROM unnest($1::text[]) AS v(k) WHERE NOT EXISTS (SELECT 1 FROM " + quoteTable(d, g.t.Name) +
		" AS t WHERE t." + d.ident(g.t.Schema.Key) + " = v.k::" + pgKeyCast(g.t, casts) + ")"
	rows, err := conn.Query(ctx, q, g.ids)
	if err != nil {
		return err
	}
	missing := make(map[string]bool)
	var k string
	if _, err := pgx.ForEachRow(rows, []any{&k}, func() error {
		missing[k] = true
		return nil
	}); err != nil {
		return err
	}
	for r, id := range g.ids {
		if missing[id] {
			results[g.writes[r]].Missing = true
		}
	}
	return nil
}

// casts returns the type of each column of t, the cast of its values in a
// patch group's statement, from what Describe found or else from the
// catalog.
func (s *pgStore) casts(ctx context.Context, conn *pgx.Conn, t *Table) (map[string]string, error) {
	if v, ok := s.types.Load(t.Name); ok {
		return v.(map[string]string), nil
	}
	cols, err := pgDescribeColumns(ctx, conn, quoteTable(pgDialect{}, t.Name))
	if err != nil {
		return nil, err
	}
	types := make(map[string]string, len(cols))
	for _, c := range cols {
		types[c.Name] = c.cast
	}
	s.types.Store(t.Name, types)
	return types, nil
}

// pgLock runs the first batch of Apply's two round trips and returns
// what is applied of every document of b: the higher of its record and its
// floor. A batch writing records creates its missing records (seq 0),
// locks them in (collection, id) order and then locks its floors; a cut
// locks its floors only and reads its records.
func pgLock(ctx context.Context, conn *pgx.Conn, b *applyBatch) (map[docKey]int64, error) {
	cols, ids, parts := b.keys()
	floors := b.floors()
	fcols, fparts, raise := floorArrays(floors)
	if b.cut {
		raise = make([]int64, len(floors))
	}
	batch := &pgx.Batch{}
	// READ COMMITTED whatever the server's default: under REPEATABLE READ
	// the FOR UPDATE below would fail with a serialization error instead
	// of reading the seq that the transaction it waited for committed.
	batch.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	if !b.cut {
		batch.Queue(pgInsertRecordsSQL, cols, ids, parts)
		batch.Queue(pgLockRecordsSQL, cols, ids)
	}
	batch.Queue(pgLockFloorsSQL, fcols, fparts, raise)
	if b.cut {
		batch.Queue(pgReadRecordsSQL, cols, ids)
	}
	br := conn.SendBatch(ctx, batch)
	defer br.Close()
	if _, err := br.Exec(); err != nil { // BEGIN
		return nil, err
	}
	records := make(map[docKey]int64, len(ids))
	readRecords := func() error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		var k docKey
		var seq int64
		_, err = pgx.ForEachRow(rows, []any{&k.collection, &k.id, &seq}, func() error {
			records[k] = seq
			return nil
		})
		return err
	}
	if !b.cut {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
		if err := readRecords(); err != nil {
			return nil, err
		}
		if len(records) != len(ids) {
			return nil, fmt.Errorf("store: apply: locked %d applied records, expected %d", len(records), len(ids))
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	locked := make(map[floorKey]int64, len(floors))
	var k floorKey
	var seq int64
	if _, err := pgx.ForEachRow(rows, []any{&k.collection, &k.part, &seq}, func() error {
		locked[k] = seq
		return nil
	}); err != nil {
		return nil, err
	}
	if len(locked) != len(floors) {
		return nil, fmt.Errorf("store: apply: locked %d floors, expected %d", len(locked), len(floors))
	}
	if b.cut {
		if err := readRecords(); err != nil {
			return nil, err
		}
	}
	return b.withFloors(records, locked), br.Close()
}

// pgRollback ends the transaction a failed Apply left open, if the
// connection is still usable.
func pgRollback(conn *pgx.Conn) {
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, "ROLLBACK")
}
