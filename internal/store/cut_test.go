package store

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writeback/writeback/internal/testenv"
)

// TestApplyCut applies cuts (PlanCut) beside applies that write records,
// in every order a replay or a racing applier can bring: a cut moves its
// floors and writes no record; a replay of it applies nothing; an apply
// writing records skips what a cut applied, and a cut what records say is
// applied; Read and AppliedMax see the floors. The increments would count
// twice any change applied twice.
func TestApplyCut(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		tbl := h.describe(t, numbersDDL)
		coll := testenv.UniqueName(t, "c")
		other := coll + "o"
		h.exec(t, fmt.Sprintf("INSERT INTO %s (id, n) VALUES (1, 0), (2, 0), (3, 0), (4, 0)", tbl.Name))
		// Seqs are unique in a partition, as the buffer gives them out.
		w := func(c, id string, part int, seqs ...int64) Write {
			wr := Write{Collection: c, Table: tbl, ID: id, Partition: part}
			for _, s := range seqs {
				wr.Changes = append(wr.Changes, incs("n", s, s)...)
			}
			return wr
		}
		cut := func(writes ...Write) []Result {
			t.Helper()
			res, err := h.s.(Planner).ApplyPlanned(t.Context(), PlanCut(writes))
			require.NoError(t, err)
			return res
		}
		check := func(step string, want map[string]string, applied map[string]int64) {
			t.Helper()
			for id, n := range want {
				d, seq := h.readIn(t, tbl, coll, id, 2)
				assert.Equal(t, n, d["n"], "%s: document %s", step, id)
				assert.Equal(t, applied[id], seq, "%s: what Read says is applied of %s", step, id)
			}
		}

		// A cut in the single round trip: no records, the floor at 3.
		assert.Equal(t, []Result{{Applied: 2, LastSeq: 2}, {Applied: 1, LastSeq: 3}}, cut(w(coll, "1", 2, 1, 2), w(coll, "2", 2, 3)))
		check("a cut", map[string]string{"1": "2", "2": "1", "3": "0"}, map[string]int64{"1": 3, "2": 3, "3": 3})
		_, seq := h.readIn(t, tbl, coll, "1", 5)
		assert.Zero(t, seq, "another partition's floor")
		singleCut(t, h.s, []Write{w(coll, "1", 2, 1, 2)}, errBehind)

		// Its replay (an applier that died before the trim) applies nothing.
		assert.Equal(t, []Result{{Skipped: 2, LastSeq: 2}, {Skipped: 1, LastSeq: 3}}, cut(w(coll, "1", 2, 1, 2), w(coll, "2", 2, 3)))
		check("the cut's replay", map[string]string{"1": "2", "2": "1"}, map[string]int64{"1": 3, "2": 3})

		// A write-through of a change the cut applied, and a new one.
		assert.Equal(t, []Result{{Applied: 1, Skipped: 1, LastSeq: 4}}, h.apply(t, w(coll, "1", 2, 2, 4)))
		check("records after a cut", map[string]string{"1": "3"}, map[string]int64{"1": 4})

		// A cut over a record of its pair (recmax 4): the two round trips,
		// which skip what the record holds.
		assert.Equal(t, []Result{{Applied: 1, Skipped: 1, LastSeq: 5}, {Applied: 1, LastSeq: 6}}, cut(w(coll, "1", 2, 4, 5), w(coll, "2", 2, 6)))
		check("a cut over records", map[string]string{"1": "4", "2": "2"}, map[string]int64{"1": 6, "2": 6})

		// Records over a cut's floor (6): the two round trips again.
		assert.Equal(t, []Result{{Applied: 1, Skipped: 1, LastSeq: 7}}, h.apply(t, w(coll, "2", 2, 6, 7)))
		check("records over a floor", map[string]string{"2": "3"}, map[string]int64{"2": 7})

		// Once a cut's first change is past recmax (7), it takes the single
		// round trip again.
		singleCut(t, h.s, []Write{w(coll, "3", 2, 8)}, nil)
		check("a cut past recmax", map[string]string{"3": "1"}, map[string]int64{"3": 8})

		// One cut of two collections in two partitions moves four floors.
		cut(w(coll, "4", 5, 1, 2), w(other, "4", 5, 3), w(other, "3", 2, 9), w(coll, "1", 2, 10))
		check("a cut of two collections", map[string]string{"1": "5", "3": "2"}, map[string]int64{"1": 10, "3": 10})
		max, err := h.s.AppliedMax(t.Context(), []string{coll})
		require.NoError(t, err)
		assert.Equal(t, map[int]int64{2: 10, 5: 2}, max)
		max, err = h.s.AppliedMax(t.Context(), []string{coll, other})
		require.NoError(t, err)
		assert.Equal(t, map[int]int64{2: 10, 5: 3}, max)
		d, _ := h.read(t, tbl, coll, "4")
		assert.Equal(t, "3", d["n"], "two collections' changes of one row")
	})
}

// singleCut runs the single round trip of a cut of writes alone and checks
// its error: errBehind leaves nothing of it.
func singleCut(t *testing.T, s Store, writes []Write, want error) {
	t.Helper()
	singleTrip(t, s, writes, true, want)
}

// TestApplyCutUpgrade opens a store whose records were written before it
// had floors (a sidecar of an earlier version): the floors' recmax must
// cover them, or a cut would apply again what a record says is applied.
func TestApplyCutUpgrade(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		tbl := h.describe(t, numbersDDL)
		coll := testenv.UniqueName(t, "c")
		h.exec(t, fmt.Sprintf("INSERT INTO %s (id, n) VALUES (1, 0)", tbl.Name))
		w := func(from, to int64) Write {
			return Write{Collection: coll, Table: tbl, ID: "1", Partition: 3, Changes: incs("n", from, to)}
		}
		h.apply(t, w(1, 2))
		h.exec(t, "DELETE FROM "+FloorsTable+" WHERE collection = '"+coll+"'")
		s, err := Open(t.Context(), h.driver, h.dsn)
		require.NoError(t, err)
		defer s.Close()
		res, err := s.(Planner).ApplyPlanned(t.Context(), PlanCut([]Write{w(1, 3)}))
		require.NoError(t, err)
		assert.Equal(t, []Result{{Applied: 1, Skipped: 2, LastSeq: 3}}, res)
		d, seq := h.readIn(t, tbl, coll, "1", 3)
		assert.Equal(t, "3", d["n"])
		assert.Equal(t, int64(3), seq)
	})
}

// TestApplyCutRacing has cuts and applies writing records race over the
// same documents' changes, each applier applying every prefix of them in
// turn, as a flush racing a partition's owner (or a slow owner after a
// takeover) does: every change must be applied once, and no two of them
// may deadlock past the retries.
func TestApplyCutRacing(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		tbl := h.describe(t, numbersDDL)
		coll := testenv.UniqueName(t, "c")
		h.exec(t, fmt.Sprintf("INSERT INTO %s (id, n) VALUES (1, 0), (2, 0), (3, 0)", tbl.Name))
		const rounds = 40
		// Round r's batch: each document's changes up to 3r (document i's
		// changes are the seqs ≡ i mod 3), so each batch is a cut of the
		// partition.
		batch := func(r int) []Write {
			var ws []Write
			for i := int64(1); i <= 3; i++ {
				w := Write{Collection: coll, Table: tbl, ID: fmt.Sprint(i), Partition: 1}
				for seq := i; seq <= int64(3*r); seq += 3 {
					w.Changes = append(w.Changes, incs("n", seq, seq)...)
				}
				ws = append(ws, w)
			}
			return ws
		}
		var wg sync.WaitGroup
		errs := make(chan error, 4*rounds)
		for a := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 1; r <= rounds; r++ {
					var err error
					if a%2 == 0 {
						_, err = h.s.(Planner).ApplyPlanned(t.Context(), PlanCut(batch(r)))
					} else {
						_, err = h.s.Apply(t.Context(), batch(r))
					}
					if err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		for _, id := range []string{"1", "2", "3"} {
			d, seq := h.readIn(t, tbl, coll, id, 1)
			assert.Equal(t, fmt.Sprint(rounds), d["n"], "document %s: each change once", id)
			assert.GreaterOrEqual(t, seq, int64(3*rounds-2), "what Read says is applied of %s", id)
		}
	})
}
