package store

import (
	"context"
	"database/sql"
	"errors"
	"strconv"

	"github.com/go-sql-driver/mysql"
)

// applySingle sends plan — planned as if no change of b was applied
// before — as one transaction in one packet (more only if it is large):
//
//	START TRANSACTION; the records' upsert (myRecordsCheckQuery); the
//	effects, each patch statement followed by myFoundCheck; COMMIT
//
// The records' upsert creates the missing records at their writes' last
// seq and moves the others there, taking their locks in (collection, id)
// order as myLock does, and fails unless each record's seq was below its
// write's first change; a patch's check fails unless it found every row
// it names (else the rows it missed are Missing, which only myLock's
// reading of the rows tells). MySQL runs the statements of a packet until
// one fails: the failure stops the packet before COMMIT, the transaction
// is rolled back and errBehind returned, and Apply takes the two round
// trips, which also tell a real error of the data (an out-of-range
// increment fails the same way) from a wrong plan.
func (s *myStore) applySingle(ctx context.Context, conn *sql.Conn, plan *applyPlan, b *applyBatch) ([]Result, error) {
	stmts, err := s.effects(ctx, plan, nil)
	if err != nil {
		if errors.Is(err, errBehind) {
			return nil, err
		}
		return nil, wrapErr("apply", err, myPermanent)
	}
	checks := []myStmt{{q: newQuery(myDialect{}).add("START TRANSACTION"), rows: -1}}
	if floors := b.floors(); b.cut {
		checks = append(checks, myStmt{q: myCutFloorsQuery(floors), rows: -1})
	} else {
		checks = append(checks, myStmt{q: myRecordsCheckQuery(plan.records, b), rows: -1}, myStmt{q: myRecordFloorsQuery(floors), rows: -1})
	}
	stmts = append(checks, stmts...)
	if err := myExecCommit(ctx, conn, stmts); err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == myOutOfRange {
			myRollback(conn)
			return nil, errBehind
		}
		return nil, wrapErr("apply", err, myPermanent)
	}
	return plan.results, nil
}

// myOutOfRange is ER_DATA_OUT_OF_RANGE, the error of the checks of
// applySingle: an expression that overflows BIGINT UNSIGNED fails in any
// sql_mode (a division by zero only warns outside strict mode), in a
// statement that is not DO (which turns errors into warnings).
const myOutOfRange = 1690

// myFail is an expression failing with myOutOfRange: n + 1 + ~0 for an n
// of at least 0, which the server cannot fold into a constant.
func myFail(n string) string { return "(" + n + " + 1 + ~0)" }

// myRecordsCheckQuery is applySingle's records statement: records are
// the plan's, in lock order (every write applies whole), and b gives
// each write's first change.
//
//	INSERT INTO applied (collection, id, part, seq) VALUES (…, last), …
//	ON DUPLICATE KEY UPDATE
//	  seq = IF(seq < <first>, VALUES(seq), <fail>), part = VALUES(part)
//
// The server evaluates the assignments in order (seq first, while it is
// still the record's) and takes the rows in the order of VALUES; each
// existing record is X-locked before it is judged, so its seq is the
// latest committed. <first> is VALUES(seq) for a write of one change, and
// else a CASE naming the writes of several.
func myRecordsCheckQuery(records []AppliedRecord, b *applyBatch) *query {
	q := myRecordsQuery(records)
	var multi []int // the writes of several changes
	for _, i := range b.order {
		if len(b.writes[i].Changes) > 1 {
			multi = append(multi, i)
		}
	}
	q.add(" ON DUPLICATE KEY UPDATE seq = IF(seq < ")
	if len(multi) == 0 {
		q.add("VALUES(seq)")
	} else {
		q.add("CASE")
		for _, i := range multi {
			w := &b.writes[i]
			q.add(" WHEN collection = ", q.arg(w.Collection), " AND id = ", q.arg(w.ID), " THEN ", q.arg(w.Changes[0].Seq))
		}
		q.add(" ELSE VALUES(seq) END")
	}
	return q.add(", VALUES(seq), ", myFail("seq"), "), part = VALUES(part)")
}

// myFloorsQuery is the head of a statement writing floors: INSERT INTO
// the floors table … VALUES, one row per floor with the seq and recmax
// its functions give.
func myFloorsQuery(fs []floor, seq, recmax func(floor) int64) *query {
	return myAddFloors(newQuery(myDialect{}), fs, seq, recmax)
}

// myAddFloors adds myFloorsQuery's statement to q.
func myAddFloors(q *query, fs []floor, seq, recmax func(floor) int64) *query {
	q.add("INSERT INTO ", FloorsTable, " (collection, part, seq, recmax) VALUES ")
	for i, f := range fs {
		if i > 0 {
			q.add(", ")
		}
		q.add("(", q.arg(f.collection), ", ", q.arg(int64(f.part)), ", ", q.arg(seq(f)), ", ", q.arg(recmax(f)), ")")
	}
	return q
}

// myFloorFirst adds the first change of the floor that an ON DUPLICATE
// KEY UPDATE judges: a CASE naming each of fs.
func myFloorFirst(q *query, fs []floor) *query {
	q.add("CASE")
	for _, f := range fs {
		q.add(" WHEN collection = ", q.arg(f.collection), " AND part = ", q.arg(int64(f.part)), " THEN ", q.arg(f.first))
	}
	return q.add(" END")
}

// floorZero and floorLast are what myFloorsQuery writes.
func floorZero(floor) int64   { return 0 }
func floorLast(f floor) int64 { return f.last }

// myCutFloorsQuery is a cut's statement in applySingle in place of the
// records': it moves each floor to its pair's last change in the batch
// and fails unless neither the floor nor a record of the pair (recmax)
// reached the pair's first change (pgCutFloorsSQL).
func myCutFloorsQuery(fs []floor) *query {
	q := myFloorsQuery(fs, floorLast, floorZero)
	q.add(" ON DUPLICATE KEY UPDATE seq = IF(GREATEST(seq, recmax) < ")
	return myFloorFirst(q, fs).add(", VALUES(seq), ", myFail("seq"), ")")
}

// myRecordFloorsQuery follows the records' statement in applySingle: it
// raises each pair's recmax to its last change in the batch and fails if
// a cut's floor reached the pair's first change (pgRecordFloorsSQL).
func myRecordFloorsQuery(fs []floor) *query {
	q := myFloorsQuery(fs, floorZero, floorLast)
	q.add(" ON DUPLICATE KEY UPDATE recmax = IF(seq < ")
	return myFloorFirst(q, fs).add(", GREATEST(recmax, VALUES(recmax)), ", myFail("seq"), ")")
}

// myFoundCheck follows a patch statement of n rows in applySingle: it
// fails unless the statement found them all (ROW_COUNT() counts the rows
// an UPDATE matched, with the pool's ClientFoundRows).
func myFoundCheck(n int) *query {
	c := strconv.Itoa(n)
	return newQuery(myDialect{}).add("SET @writeback_found = IF(ROW_COUNT() = ", c, ", 0, ", myFail("ROW_COUNT()"), ")")
}
