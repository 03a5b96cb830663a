package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/testenv"
)

var numbersDDL = map[string]string{
	"postgres": "CREATE TABLE %s (id bigint PRIMARY KEY, n bigint, f double precision, s varchar(20), note text)",
	"mysql":    "CREATE TABLE %s (id bigint PRIMARY KEY, n bigint, f double, s varchar(20), note text)",
}

// TestApplyEffects checks each effect against change.ApplyAll: what the
// store holds after Apply is what the cache computes from the same changes.
func TestApplyEffects(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		tbl := h.describe(t, numbersDDL)
		coll := testenv.UniqueName(t, "c")
		row := func(id, n, f, s, note string) map[string]string {
			return map[string]string{"id": id, "n": n, "f": f, "s": s, "note": note}
		}
		cases := []struct {
			name    string
			id      string
			changes []change.Change
			want    map[string]string // nil: no row
			result  Result
		}{
			{
				name:    "put",
				id:      "1",
				changes: []change.Change{put(1, row("1", "5", "1.5", `"x"`, `"n"`))},
				want:    row("1", "5", "1.5", `"x"`, `"n"`),
				result:  Result{Applied: 1, LastSeq: 1},
			},
			{
				name:    "put replaces",
				id:      "1",
				changes: []change.Change{put(2, row("1", "6", "null", `"y"`, "null"))},
				want:    row("1", "6", "null", `"y"`, "null"),
				result:  Result{Applied: 1, LastSeq: 2},
			},
			{
				name:    "set, unset and inc",
				id:      "1",
				changes: []change.Change{set(3, map[string]string{"s": `"z"`, "note": `"hello"`}), unset(4, "note"), inc(5, "n", "2"), inc(6, "n", "-10")},
				want:    row("1", "-2", "null", `"z"`, "null"),
				result:  Result{Applied: 4, LastSeq: 6},
			},
			{
				name: "inc of NULL counts from zero",
				id:   "2",
				changes: []change.Change{
					put(1, row("2", "null", "null", "null", "null")),
				},
				want:   row("2", "null", "null", "null", "null"),
				result: Result{Applied: 1, LastSeq: 1},
			},
			{
				name:    "inc of NULL counts from zero (patch)",
				id:      "2",
				changes: []change.Change{inc(2, "n", "3"), inc(3, "f", "0.5")},
				want:    row("2", "3", "0.5", "null", "null"),
				result:  Result{Applied: 2, LastSeq: 3},
			},
			{
				// The float amounts stay apart: 0 + 0.1 + 0.2 rounds twice,
				// as applying them one by one does (0.30000000000000004).
				name:    "float amounts",
				id:      "2",
				changes: []change.Change{set(4, map[string]string{"f": "0"}), inc(5, "f", "0.1")},
				want:    row("2", "3", "0.1", "null", "null"),
				result:  Result{Applied: 2, LastSeq: 5},
			},
			{
				name:    "float amounts one by one",
				id:      "2",
				changes: []change.Change{inc(6, "f", "0.2"), inc(7, "f", "1e-17")},
				want:    row("2", "3", "0.30000000000000004", "null", "null"),
				result:  Result{Applied: 2, LastSeq: 7},
			},
			{
				name:    "put then patch compacts to a put",
				id:      "3",
				changes: []change.Change{put(1, row("3", "1", "null", `"a"`, "null")), inc(2, "n", "41"), set(3, map[string]string{"s": `"b"`})},
				want:    row("3", "42", "null", `"b"`, "null"),
				result:  Result{Applied: 3, LastSeq: 3},
			},
			{
				name:    "delete",
				id:      "3",
				changes: []change.Change{inc(4, "n", "1"), del(5)},
				want:    nil,
				result:  Result{Applied: 2, LastSeq: 5},
			},
			{
				name:    "delete then put",
				id:      "4",
				changes: []change.Change{del(1), put(2, row("4", "7", "null", "null", "null"))},
				want:    row("4", "7", "null", "null", "null"),
				result:  Result{Applied: 2, LastSeq: 2},
			},
			{
				name:    "patch of a missing row",
				id:      "5",
				changes: []change.Change{inc(1, "n", "1")},
				want:    nil,
				result:  Result{Applied: 1, LastSeq: 1, Missing: true},
			},
			{
				// An unchanged row is still found (MySQL: clientFoundRows).
				name:    "patch that changes nothing",
				id:      "4",
				changes: []change.Change{set(3, map[string]string{"n": "7"})},
				want:    row("4", "7", "null", "null", "null"),
				result:  Result{Applied: 1, LastSeq: 3},
			},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before, _, err := h.s.Read(t.Context(), tbl, coll, tc.id, 1)
				require.NoError(t, err)
				res := h.apply(t, Write{Collection: coll, Table: tbl, ID: tc.id, Partition: 1, Changes: tc.changes})
				assert.Equal(t, tc.result, res[0])
				got, seq := h.read(t, tbl, coll, tc.id)
				assert.Equal(t, tc.result.LastSeq, seq)
				assert.Equal(t, tc.want, got)
				if !tc.result.Missing {
					cached, err := change.ApplyAll(before, tc.changes)
					require.NoError(t, err)
					assert.Equal(t, text(cached), got, "the store disagrees with change.ApplyAll")
				}
			})
		}
	})
}

// TestApplyBatchAcrossTables applies one batch touching two tables and two
// collections, with puts, patches and deletes mixed.
func TestApplyBatchAcrossTables(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		nums := h.describe(t, numbersDDL)
		texts := h.describe(t, map[string]string{
			"postgres": "CREATE TABLE %s (id text PRIMARY KEY, v text NOT NULL)",
			"mysql":    "CREATE TABLE %s (id varchar(100) COLLATE utf8mb4_nopad_bin PRIMARY KEY, v text NOT NULL)",
		})
		cn, ct := testenv.UniqueName(t, "nums"), testenv.UniqueName(t, "texts")
		h.apply(t, Write{Collection: cn, Table: nums, ID: "1", Changes: []change.Change{put(1, map[string]string{"id": "1", "n": "1"})}})
		res := h.apply(t,
			Write{Collection: ct, Table: texts, ID: "b", Changes: []change.Change{put(1, map[string]string{"id": `"b"`, "v": `"B"`})}},
			Write{Collection: cn, Table: nums, ID: "1", Changes: []change.Change{inc(2, "n", "1")}},
			Write{Collection: ct, Table: texts, ID: "a", Changes: []change.Change{put(1, map[string]string{"id": `"a"`, "v": `"A"`}), del(2)}},
			Write{Collection: cn, Table: nums, ID: "2", Changes: []change.Change{put(5, map[string]string{"id": "2", "n": "2"})}},
			Write{Collection: cn, Table: nums, ID: "9"}, // no changes: untouched
		)
		assert.Equal(t, []Result{{Applied: 1, LastSeq: 1}, {Applied: 1, LastSeq: 2}, {Applied: 2, LastSeq: 2}, {Applied: 1, LastSeq: 5}, {}}, res)
		d, seq := h.read(t, texts, ct, "b")
		assert.Equal(t, map[string]string{"id": `"b"`, "v": `"B"`}, d)
		assert.Equal(t, int64(1), seq)
		d, seq = h.read(t, texts, ct, "a")
		assert.Nil(t, d)
		assert.Equal(t, int64(2), seq)
		d, _ = h.read(t, nums, cn, "1")
		assert.Equal(t, "2", d["n"])
		d, seq = h.read(t, nums, cn, "2")
		assert.Equal(t, "2", d["n"])
		assert.Equal(t, int64(5), seq)
		_, seq = h.read(t, nums, cn, "9")
		assert.Zero(t, seq, "a write without changes leaves no record")
	})
}

func TestApplyExactlyOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		tbl := h.describe(t, numbersDDL)
		coll := testenv.UniqueName(t, "c")
		h.apply(t, Write{Collection: coll, Table: tbl, ID: "1", Changes: []change.Change{put(1, map[string]string{"id": "1", "n": "0"})}})
		w := Write{Collection: coll, Table: tbl, ID: "1", Changes: append([]change.Change{put(1, map[string]string{"id": "1", "n": "0"})}, incs("n", 2, 4)...)}

		// The put was applied before: only the three increments apply.
		res := h.apply(t, w)
		assert.Equal(t, Result{Applied: 3, Skipped: 1, LastSeq: 4}, res[0])
		d, _ := h.read(t, tbl, coll, "1")
		assert.Equal(t, "3", d["n"])

		// A replay of the same write after a crash applies nothing.
		res = h.apply(t, w)
		assert.Equal(t, Result{Skipped: 4, LastSeq: 4}, res[0])
		d, seq := h.read(t, tbl, coll, "1")
		assert.Equal(t, "3", d["n"])
		assert.Equal(t, int64(4), seq)

		// A longer prefix whose head was applied: only the tail applies.
		w.Changes = append(w.Changes, incs("n", 5, 6)...)
		res = h.apply(t, w)
		assert.Equal(t, Result{Applied: 2, Skipped: 4, LastSeq: 6}, res[0])
		d, seq = h.read(t, tbl, coll, "1")
		assert.Equal(t, "5", d["n"])
		assert.Equal(t, int64(6), seq)

		// A stale write (the buffer's head already trimmed) skips too.
		res = h.apply(t, Write{Collection: coll, Table: tbl, ID: "1", Changes: incs("n", 2, 3)})
		assert.Equal(t, Result{Skipped: 2, LastSeq: 3}, res[0])
		_, seq = h.read(t, tbl, coll, "1")
		assert.Equal(t, int64(6), seq, "a skipped write does not move the record back")
	})
}

// TestApplyConcurrent has 16 appliers race over the same documents, each
// applying random prefixes of the same +1 increments in random batch
// compositions and orders — what replays, takeovers and overlapping
// batches produce. Every increment must land exactly once, and no
// deadlock may surface.
func TestApplyConcurrent(t *testing.T) {
	const (
		workers = 16
		rounds  = 15
		seqs    = 40 // increments per document
	)
	eachStore(t, func(t *testing.T, h *harness) {
		type docRef struct {
			coll string
			tbl  *Table
			id   string
		}
		var docs []docRef
		for i := range 2 {
			tbl := h.describe(t, numbersDDL)
			coll := testenv.UniqueName(t, "c")
			for id := range 4 {
				sid := strconv.Itoa(id + 10*i)
				docs = append(docs, docRef{coll, tbl, sid})
				h.exec(t, fmt.Sprintf("INSERT INTO %s (id, n) VALUES (%s, 0)", tbl.Name, sid))
			}
		}
		var mu sync.Mutex // guards applied
		applied := make([]int, len(docs))
		run := func(ctx context.Context, rng *rand.Rand, full bool) error {
			perm := rng.Perm(len(docs))
			if !full {
				perm = perm[:1+rng.IntN(len(docs))]
			}
			writes := make([]Write, len(perm))
			for i, d := range perm {
				hi := int64(seqs)
				if !full {
					hi = 1 + rng.Int64N(seqs)
				}
				writes[i] = Write{Collection: docs[d].coll, Table: docs[d].tbl, ID: docs[d].id, Partition: d, Changes: incs("n", 1, hi)}
			}
			res, err := h.s.Apply(ctx, writes)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			for i, d := range perm {
				if res[i].Applied+res[i].Skipped != len(writes[i].Changes) {
					return fmt.Errorf("result %+v for %d changes", res[i], len(writes[i].Changes))
				}
				applied[d] += res[i].Applied
			}
			return nil
		}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 42))
				for range rounds {
					if err := run(t.Context(), rng, false); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.NoError(t, run(t.Context(), rand.New(rand.NewPCG(7, 7)), true))
		for i, d := range docs {
			got, seq := h.read(t, d.tbl, d.coll, d.id)
			assert.Equal(t, strconv.Itoa(seqs), got["n"], "document %s/%s", d.coll, d.id)
			assert.Equal(t, int64(seqs), seq)
			assert.Equal(t, seqs, applied[i], "changes of %s/%s reported applied", d.coll, d.id)
		}
	})
}

func TestApplyErrors(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		tbl := h.describe(t, map[string]string{
			"postgres": "CREATE TABLE %s (id bigint PRIMARY KEY, req text NOT NULL, short varchar(5), u int UNIQUE, n bigint)",
			"mysql":    "CREATE TABLE %s (id bigint PRIMARY KEY, req text NOT NULL, short varchar(5), u int UNIQUE, n bigint)",
		})
		coll := testenv.UniqueName(t, "c")
		row := func(id, req, short, u string) map[string]string {
			return map[string]string{"id": id, "req": req, "short": short, "u": u, "n": "null"}
		}
		good := Write{Collection: coll, Table: tbl, ID: "1", Changes: []change.Change{put(1, row("1", `"r"`, `"ok"`, "7"))}}
		h.apply(t, good)
		h.apply(t, Write{Collection: coll, Table: tbl, ID: "9", Changes: []change.Change{put(1, map[string]string{"id": "9", "req": `"r"`, "n": "9223372036854775807"})}})

		permanent := []struct {
			name    string
			id      string
			changes []change.Change
		}{
			{"not null", "2", []change.Change{put(1, row("2", "null", "null", "null"))}},
			{"too long", "2", []change.Change{put(1, row("2", `"r"`, `"too long"`, "null"))}},
			{"duplicate unique", "2", []change.Change{put(1, row("2", `"r"`, "null", "7"))}},
			{"set not null to null", "1", []change.Change{set(2, map[string]string{"req": "null"})}},
			{"integer overflow", "9", []change.Change{inc(2, "n", "1")}},
			{"unknown column", "2", []change.Change{put(1, map[string]string{"id": "2", "req": `"r"`, "nope": "1"})}},
			{"patch after delete", "2", []change.Change{del(1), inc(2, "n", "1")}},
		}
		for _, tc := range permanent {
			t.Run(tc.name, func(t *testing.T) {
				before, beforeSeq := h.read(t, tbl, coll, tc.id)
				// A good write in the same batch must not commit either.
				other := testenv.UniqueName(t, "other")
				_, err := h.s.Apply(t.Context(), []Write{
					{Collection: other, Table: tbl, ID: "100", Changes: []change.Change{put(1, row("100", `"r"`, "null", "null"))}},
					{Collection: coll, Table: tbl, ID: tc.id, Changes: tc.changes},
				})
				require.Error(t, err)
				assert.True(t, IsPermanent(err), "%v should be permanent", err)
				var se *Error
				assert.True(t, errors.As(err, &se))
				assert.Regexp(t, "^store: ", err.Error())
				after, afterSeq := h.read(t, tbl, coll, tc.id)
				assert.Equal(t, before, after)
				assert.Equal(t, beforeSeq, afterSeq)
				d, seq := h.read(t, tbl, other, "100")
				assert.Nil(t, d)
				assert.Zero(t, seq)
			})
		}

		t.Run("cancelled context", func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			_, err := h.s.Apply(ctx, []Write{{Collection: coll, Table: tbl, ID: "3", Changes: []change.Change{put(1, row("3", `"r"`, "null", "null"))}}})
			require.Error(t, err)
			assert.False(t, IsPermanent(err))
			assert.ErrorIs(t, err, context.Canceled)
		})

		t.Run("the store still works", func(t *testing.T) {
			res := h.apply(t, Write{Collection: coll, Table: tbl, ID: "1", Changes: []change.Change{put(1, nil), set(2, map[string]string{"short": `"fine"`})}})
			assert.Equal(t, Result{Applied: 1, Skipped: 1, LastSeq: 2}, res[0])
		})

		t.Run("puts into a table with another unique index", func(t *testing.T) {
			// Row 1 exists (upsert), row 4 does not (insert), both in one
			// batch; row 1 takes a new unique value, row 4 row 1's old one.
			res := h.apply(t,
				Write{Collection: coll, Table: tbl, ID: "1", Changes: []change.Change{put(3, row("1", `"r1"`, `"a"`, "8"))}},
				Write{Collection: coll, Table: tbl, ID: "4", Changes: []change.Change{put(1, row("4", `"r4"`, `"b"`, "null"))}},
			)
			assert.Equal(t, []Result{{Applied: 1, LastSeq: 3}, {Applied: 1, LastSeq: 1}}, res)
			d, _ := h.read(t, tbl, coll, "1")
			assert.Equal(t, row("1", `"r1"`, `"a"`, "8"), d)
			d, _ = h.read(t, tbl, coll, "4")
			assert.Equal(t, row("4", `"r4"`, `"b"`, "null"), d)
		})

		t.Run("bad batches", func(t *testing.T) {
			_, err := h.s.Apply(t.Context(), []Write{good, good})
			assert.ErrorContains(t, err, "appears twice")
			_, err = h.s.Apply(t.Context(), []Write{{Collection: coll, Table: tbl, ID: "1", Changes: []change.Change{inc(3, "n", "1"), inc(3, "n", "1")}}})
			assert.ErrorContains(t, err, "increasing")
			res, err := h.s.Apply(t.Context(), nil)
			assert.NoError(t, err)
			assert.Empty(t, res)
		})
	})
}

func TestAppliedRecords(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		tbl := h.describe(t, numbersDDL)
		coll := testenv.UniqueName(t, "c")
		// Partitions no other test uses: the applied table is shared.
		p1 := 1_000_000 + rand.IntN(1_000_000_000)
		p2 := p1 + 1
		write := func(id string, part int, changes ...change.Change) Write {
			return Write{Collection: coll, Table: tbl, ID: id, Partition: part, Changes: changes}
		}
		h.apply(t,
			write("1", p1, put(3, map[string]string{"id": "1"})),
			write("2", p1, put(7, map[string]string{"id": "2"})),
			write("3", p2, put(5, map[string]string{"id": "3"})),
			write("4", p2, put(1, map[string]string{"id": "4"})),
		)

		t.Run("applied max", func(t *testing.T) {
			maxes, err := h.s.AppliedMax(t.Context(), []string{coll})
			require.NoError(t, err)
			assert.Equal(t, map[int]int64{p1: 7, p2: 5}, maxes)
		})
		// Another deployment sharing the database (its own collections,
		// its own Redis) runs ahead in the same partitions: its records
		// are no floors of this one's sequences, which would otherwise
		// look rolled back.
		t.Run("applied max of the named collections only", func(t *testing.T) {
			other := testenv.UniqueName(t, "c")
			h.apply(t, Write{Collection: other, Table: tbl, ID: "9", Partition: p1, Changes: []change.Change{put(900, map[string]string{"id": "9"})}})
			maxes, err := h.s.AppliedMax(t.Context(), []string{coll})
			require.NoError(t, err)
			assert.Equal(t, map[int]int64{p1: 7, p2: 5}, maxes)
			maxes, err = h.s.AppliedMax(t.Context(), []string{coll, other})
			require.NoError(t, err)
			assert.Equal(t, map[int]int64{p1: 900, p2: 5}, maxes)
			maxes, err = h.s.AppliedMax(t.Context(), nil)
			require.NoError(t, err)
			assert.Empty(t, maxes)
		})

		list := func(t *testing.T) []AppliedRecord {
			var out []AppliedRecord
			afterC, afterID := coll, ""
			for {
				page, err := h.s.ListApplied(t.Context(), afterC, afterID, 2)
				require.NoError(t, err)
				for _, r := range page {
					if r.Collection != coll {
						return out
					}
					out = append(out, r)
				}
				if len(page) < 2 {
					return out
				}
				afterC, afterID = page[1].Collection, page[1].ID
			}
		}

		t.Run("list", func(t *testing.T) {
			assert.Equal(t, []AppliedRecord{
				{coll, "1", p1, 3}, {coll, "2", p1, 7}, {coll, "3", p2, 5}, {coll, "4", p2, 1},
			}, list(t))
		})

		t.Run("compact", func(t *testing.T) {
			// Record 2 moves on after the compactor listed it: it stays.
			h.apply(t, write("2", p1, inc(8, "n", "1")))
			n, err := h.s.CompactApplied(t.Context(), []AppliedRecord{
				{coll, "3", p2, 5}, {coll, "1", p1, 3}, {coll, "2", p1, 7}, {coll, "404", p1, 1},
			})
			require.NoError(t, err)
			assert.Equal(t, 2, n)
			assert.Equal(t, []AppliedRecord{{coll, "2", p1, 8}, {coll, "4", p2, 1}}, list(t))
			_, seq := h.read(t, tbl, coll, "1")
			assert.Zero(t, seq)
			n, err = h.s.CompactApplied(t.Context(), nil)
			require.NoError(t, err)
			assert.Zero(t, n)
		})
	})
}

// Operators inside JSON columns are computed from the row's current value
// in the applying transaction, exactly once; a value they cannot apply to
// is a permanent error.
func TestApplyJSONColumnOperators(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		tbl := h.describe(t, typedDDL)
		coll := testenv.UniqueName(t, "c")
		patch := func(seq int64, body string) change.Change {
			t.Helper()
			c, err := change.ParsePatch(tbl.Schema, []byte(body))
			require.NoError(t, err, body)
			c.Seq = seq
			return c
		}
		h.apply(t, Write{Collection: coll, Table: tbl, ID: "a", Changes: []change.Change{put(1, map[string]string{"id": `"a"`, "j": `{"tags":["x"],"n":1}`})}})
		w := Write{Collection: coll, Table: tbl, ID: "a", Changes: []change.Change{
			patch(2, `{"$push":{"j.tags":"y"}}`),
			patch(3, `{"$addToSet":{"j.tags":"x"}}`),
			patch(4, `{"$push":{"j.tags":"z"},"$inc":{"j.n":2}}`),
			patch(5, `{"$pull":{"j.tags":"x"}}`),
		}}
		res := h.apply(t, w)
		require.Equal(t, 4, res[0].Applied)
		got, _ := h.read(t, tbl, coll, "a")
		var j struct {
			Tags []string
			N    int
		}
		require.NoError(t, json.Unmarshal([]byte(got["j"]), &j), got["j"])
		require.Equal(t, []string{"y", "z"}, j.Tags)
		require.Equal(t, 3, j.N)
		// A replay (crash before the trim) applies nothing: no second "y".
		res = h.apply(t, w)
		require.Equal(t, 0, res[0].Applied)
		require.Equal(t, 4, res[0].Skipped)
		again, _ := h.read(t, tbl, coll, "a")
		require.Equal(t, got["j"], again["j"])
		// $push onto a number: the store's data says no, for good.
		_, err := h.s.Apply(t.Context(), []Write{{Collection: coll, Table: tbl, ID: "a", Changes: []change.Change{patch(6, `{"$push":{"j.n":1}}`)}}})
		require.Error(t, err)
		require.True(t, IsPermanent(err), "%v", err)
	})
}
