package store

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/testenv"
)

// TestApplyBehindInBatch has one batch mix documents without a record,
// with a record just below their write (the single-round-trip plan holds
// for them) and one whose write was partly applied before (it does not):
// the batch must fall back to reading the records and apply each
// document's unapplied tail exactly once. It also runs the single round
// trip alone: it must refuse such a batch (errBehind) and leave nothing of
// it behind, and accept one whose records are all behind.
func TestApplyBehindInBatch(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		tbl := h.describe(t, numbersDDL)
		coll := testenv.UniqueName(t, "c")
		h.exec(t, fmt.Sprintf("INSERT INTO %s (id, n) VALUES (1, 0), (2, 0), (3, 0), (4, 0)", tbl.Name))
		w := func(id string, from, to int64) Write {
			return Write{Collection: coll, Table: tbl, ID: id, Partition: 3, Changes: incs("n", from, to)}
		}
		h.apply(t, w("2", 1, 2), w("3", 1, 1))
		batch := []Write{w("4", 5, 5), w("3", 2, 3), w("2", 1, 4), w("1", 1, 3)}
		want := map[string]string{"1": "3", "2": "4", "3": "3", "4": "1"}
		singleRoundTrip(t, h.s, batch, errBehind)
		for id := range want {
			d, seq := h.read(t, tbl, coll, id)
			require.Equal(t, map[string]int64{"2": 2, "3": 1}[id], seq, "record of %s after the refused round trip", id)
			require.Equal(t, map[string]string{"1": "0", "2": "2", "3": "1", "4": "0"}[id], d["n"], "document %s after the refused round trip", id)
		}
		// Records just below their writes, or none: the plan holds.
		singleRoundTrip(t, h.s, []Write{w("3", 2, 3), w("4", 5, 5)}, nil)
		// A write of one change whose record reached it (its batch of one
		// change each takes the check without the first changes' arrays).
		singleRoundTrip(t, h.s, []Write{w("1", 1, 1), w("4", 5, 5)}, errBehind)
		for id, want := range map[string]int64{"1": 0, "4": 5} {
			_, seq := h.read(t, tbl, coll, id)
			require.Equal(t, want, seq, "record of %s after the refused round trip of single changes", id)
		}
		batch[0], batch[1] = w("4", 7, 7), w("3", 4, 5)
		want["3"], want["4"] = "5", "2"
		// A patch that leaves its row as it was still finds it.
		singleRoundTrip(t, h.s, []Write{{Collection: coll, Table: tbl, ID: "4", Partition: 3, Changes: []change.Change{set(6, map[string]string{"n": "1"})}}}, nil)
		// A patch of a missing row: PostgreSQL's statement returns the
		// rows it found; MySQL's takes the two round trips to tell them.
		missing := Write{Collection: coll, Table: tbl, ID: "9", Changes: incs("n", 1, 1)}
		singleRoundTrip(t, h.s, []Write{missing}, map[string]error{"mysql": errBehind}[h.driver])
		res := h.apply(t, batch...)
		assert.Equal(t, []Result{
			{Applied: 1, LastSeq: batch[0].Changes[0].Seq},
			{Applied: 2, LastSeq: batch[1].Changes[1].Seq},
			{Applied: 2, Skipped: 2, LastSeq: 4},
			{Applied: 3, LastSeq: 3},
		}, res)
		for id, want := range want {
			d, _ := h.read(t, tbl, coll, id)
			assert.Equal(t, want, d["n"], "document %s", id)
		}
		_, seq := h.read(t, tbl, coll, "2")
		assert.Equal(t, int64(4), seq)
	})
}

// singleRoundTrip runs the single round trip of an Apply of writes alone
// and checks its error.
func singleRoundTrip(t *testing.T, s Store, writes []Write, want error) {
	t.Helper()
	singleTrip(t, s, writes, false, want)
}

// singleTrip is singleRoundTrip of a batch planned as a cut or not.
func singleTrip(t *testing.T, s Store, writes []Write, cut bool, want error) {
	t.Helper()
	b, err := newApplyBatch(writes)
	require.NoError(t, err)
	b.cut = cut
	plan, err := b.plan(nil, nil)
	require.NoError(t, err)
	switch s := s.(type) {
	case *pgStore:
		conn, err := s.pool.Acquire(t.Context())
		require.NoError(t, err)
		defer conn.Release()
		_, err = s.applyPlan(t.Context(), conn.Conn(), plan, b, true)
		require.ErrorIs(t, err, want)
		require.Equal(t, byte('I'), conn.Conn().PgConn().TxStatus(), "the connection is left outside a transaction")
	case *myStore:
		conn, err := s.applyDB.Conn(t.Context())
		require.NoError(t, err)
		defer conn.Close()
		_, err = s.applySingle(t.Context(), conn, plan, b)
		require.ErrorIs(t, err, want)
		var inTx bool
		require.NoError(t, conn.QueryRowContext(t.Context(), "SELECT @@in_transaction").Scan(&inTx))
		require.False(t, inTx, "the connection is left outside a transaction")
	default:
		t.Fatalf("no single round trip for %T", s)
	}
}

// TestApplyPlannedAhead plans a batch (Plan, as an applier plans its next
// batch while the current one is in the store) and lets another applier
// commit part of it before the planned batch is applied: the plan, made as
// if nothing were applied, must not apply those changes again. A Planned
// applied a second time plans again and skips everything.
func TestApplyPlannedAhead(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		tbl := h.describe(t, numbersDDL)
		coll := testenv.UniqueName(t, "c")
		h.exec(t, fmt.Sprintf("INSERT INTO %s (id, n) VALUES (1, 0), (2, 0)", tbl.Name))
		w := func(id string, from, to int64) Write {
			return Write{Collection: coll, Table: tbl, ID: id, Partition: 1, Changes: incs("n", from, to)}
		}
		planned := Plan([]Write{w("1", 1, 3), w("2", 1, 2)})
		require.NotNil(t, planned.first, "a batch of increments is planned for the single round trip")
		h.apply(t, w("1", 1, 2)) // the other applier, meanwhile
		pl := h.s.(Planner)
		res, err := pl.ApplyPlanned(t.Context(), planned)
		require.NoError(t, err)
		assert.Equal(t, []Result{{Applied: 1, Skipped: 2, LastSeq: 3}, {Applied: 2, LastSeq: 2}}, res)
		res, err = pl.ApplyPlanned(t.Context(), planned)
		require.NoError(t, err)
		assert.Equal(t, []Result{{Skipped: 3, LastSeq: 3}, {Skipped: 2, LastSeq: 2}}, res)
		for id, want := range map[string]string{"1": "3", "2": "2"} {
			d, seq := h.read(t, tbl, coll, id)
			assert.Equal(t, want, d["n"], "document %s", id)
			assert.Equal(t, map[string]int64{"1": 3, "2": 2}[id], seq, "record of %s", id)
		}
		_, err = pl.ApplyPlanned(t.Context(), Plan([]Write{w("1", 2, 2), w("1", 3, 3)}))
		require.ErrorContains(t, err, "appears twice", "Plan's refusal is ApplyPlanned's error")
	})
}
