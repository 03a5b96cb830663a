package store

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/testenv"
)

// perRowPatchQuery is the statement that applied one patch before patches
// were grouped by shape (one UPDATE per row), kept as the reference the
// set-based statements are checked against:
// SET a = ?, b = COALESCE(b, 0) + ? + ? … WHERE key = ?. Its row count says
// whether the row exists (MySQL counts matched rows: clientFoundRows).
func perRowPatchQuery(d dialect, t *Table, id string, e change.Effect) (*query, error) {
	q := newQuery(d).add("UPDATE ", quoteTable(d, t.Name), " SET ")
	cols, vals, err := patchRow(t, id, e)
	if err != nil {
		return nil, err
	}
	i := 0
	for n, pc := range cols {
		if n > 0 {
			q.add(", ")
		}
		col := d.ident(pc.c.Name)
		if pc.amounts == 0 {
			q.add(col, " = ", q.arg(vals[i]))
			i++
			continue
		}
		q.add(col, " = COALESCE(", col, ", 0)")
		for range pc.amounts {
			ph := q.arg(vals[i])
			if _, pg := d.(pgDialect); pg && pc.c.Type == change.TypeFloat {
				ph += "::float8"
			} else if pg {
				ph += "::int8"
			}
			q.add(" + ", ph)
			i++
		}
	}
	key := d.ident(t.Schema.Key)
	if len(cols) == 0 {
		q.add(key, " = ", key)
	}
	q.add(" WHERE ", key, " = ", d.keyParam(q.arg(id), t.Schema.KeyType()))
	return q, nil
}

func (h *harness) dialect() dialect {
	if h.driver == "postgres" {
		return pgDialect{}
	}
	return myDialect{}
}

// execCount runs q outside any transaction and returns its row count.
func (h *harness) execCount(t *testing.T, q *query) int64 {
	t.Helper()
	ctx := context.Background()
	switch s := h.s.(type) {
	case *pgStore:
		tag, err := s.pool.Exec(ctx, q.String(), q.args...)
		require.NoError(t, err, q.String())
		return tag.RowsAffected()
	case *myStore:
		res, err := s.db.ExecContext(ctx, q.String(), q.args...)
		require.NoError(t, err, q.String())
		n, err := res.RowsAffected()
		require.NoError(t, err)
		return n
	}
	t.Fatalf("unknown store %T", h.s)
	return 0
}

// twinWrite is one write of a twin test: the changes of a document, of
// which the first skip were applied by an earlier Apply.
type twinWrite struct {
	coll    string // suffix of the collection's name: documents of "a" and "b" can share a row
	id      string
	changes []change.Change
	skip    int
}

// applyPerRow applies w to the reference table ref the way the store
// applied a batch before patches were set-based: the compacted effect of
// the changes past skip, a patch as one UPDATE of its row. It reports
// whether a patch found no row.
func (h *harness) applyPerRow(t *testing.T, ref *Table, w twinWrite) (missing bool) {
	t.Helper()
	if len(w.changes) == w.skip {
		return false
	}
	e, err := change.Compact(w.changes[w.skip:])
	require.NoError(t, err)
	d := h.dialect()
	switch e.Kind {
	case change.Put:
		cols, row, err := putRow(ref, w.id, e.Doc)
		require.NoError(t, err)
		h.execCount(t, putQueries(d, ref, cols, [][]any{row}, true)[0])
	case change.Delete:
		h.execCount(t, deleteQueries(d, ref, []any{w.id})[0])
	case change.Patch:
		if len(e.JSON) > 0 {
			require.NoError(t, foldJSON(&e, &Write{Table: ref, ID: w.id}, func(t2 *Table, id string) (change.Doc, error) {
				doc, _, err := h.s.Read(t.Context(), t2, "unused", id, 0)
				return doc, err
			}))
		}
		q, err := perRowPatchQuery(d, ref, w.id, e)
		require.NoError(t, err)
		return h.execCount(t, q) == 0
	}
	return false
}

// twins creates two tables from ddl (%[1]s the table's name, %[2]s the
// prefix of the PostgreSQL types it may use: an enum %[2]s_mood and a
// domain %[2]s_pos) and describes them: one for Apply, one for the
// per-row reference.
func (h *harness) twins(t *testing.T, ddl map[string]string) (*Table, *Table) {
	t.Helper()
	types := testenv.UniqueName(t, "ty")
	if h.driver == "postgres" {
		h.exec(t, fmt.Sprintf("CREATE TYPE %s_mood AS ENUM ('sad', 'ok')", types))
		h.exec(t, fmt.Sprintf("CREATE DOMAIN %s_pos AS integer CHECK (VALUE > 0)", types))
		t.Cleanup(func() { h.exec(t, fmt.Sprintf("DROP TYPE %[1]s_mood; DROP DOMAIN %[1]s_pos", types)) })
	}
	var out [2]*Table
	for i := range out {
		name := testenv.UniqueName(t, "tw")
		h.exec(t, fmt.Sprintf(ddl[h.driver], name, types))
		t.Cleanup(func() { h.exec(t, "DROP TABLE IF EXISTS "+name) })
		tbl, err := h.s.Describe(t.Context(), name, "id")
		require.NoError(t, err)
		out[i] = tbl
	}
	return out[0], out[1]
}

// typesDDL has a column of each kind, with type modifiers, an enum and a
// domain.
var typesDDL = map[string]string{
	"postgres": `CREATE TABLE %[1]s (id bigint PRIMARY KEY, n integer, big bigint, f double precision, r real,
		d numeric(10,2), s varchar(10), c char(3), t text, j jsonb, js json, flag boolean, ts timestamptz,
		u uuid, mood %[2]s_mood, pos %[2]s_pos, arr integer[])`,
	"mysql": "CREATE TABLE %[1]s (id bigint PRIMARY KEY, n int, big bigint, f double, r float, " +
		"d decimal(10,2), s varchar(10), c char(3), t text, j json, js longtext CHECK (json_valid(js)), flag tinyint(1), ts datetime, " +
		"u char(36), mood enum('sad','ok'), pos int unsigned, arr varchar(20))",
}

// TestApplyPatchShapes applies batches mixing patches of different
// shapes (column sets, NULLs, JSON columns, integer and float $inc,
// from NULL too), puts, deletes, patches of missing rows, replays and two
// collections patching one row, and compares every row and Result with
// what the per-row statements write into a twin table.
func TestApplyPatchShapes(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		flag := map[string]string{"postgres": "true", "mysql": "1"}[h.driver]
		ts := map[string]string{"postgres": `"2024-01-02 03:04:05+00"`, "mysql": `"2024-01-02 03:04:05"`}[h.driver]
		full := func(id string) map[string]string {
			return map[string]string{"id": id, "n": "7", "big": "70", "f": "1.25", "r": "0.5", "d": "3.10",
				"s": `"seed"`, "c": `"abc"`, "t": `"text"`, "j": `{"tags":["x"]}`, "js": `{"k":1}`, "flag": flag,
				"ts": ts, "u": `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`, "mood": `"sad"`, "pos": "1", "arr": `"{1,2}"`}
		}
		nulls := func(id string) map[string]string {
			m := full(id)
			for k := range m {
				if k != "id" {
					m[k] = "null"
				}
			}
			return m
		}
		big := strings.Repeat("é", 30000) // 60000 bytes: a few make more than one MySQL statement
		cases := []struct {
			name  string
			ddl   map[string]string
			seed  map[string]map[string]string // id → row
			prior []twinWrite                  // applied first, in a batch of their own
			batch []twinWrite
		}{
			{
				name: "integer key, every type",
				ddl:  typesDDL,
				seed: map[string]map[string]string{
					"1": full("1"), "2": full("2"), "3": full("3"), "4": full("4"), "5": full("5"), "6": nulls("6"),
					"7": full("7"), "8": nulls("8"), "9": full("9"), "10": full("10"), "11": full("11"), "12": full("12"),
					"16": full("16"), "17": full("17"), "18": full("18"), "20": full("20"),
				},
				prior: []twinWrite{
					{coll: "a", id: "17", changes: []change.Change{set(10, map[string]string{"s": `"p1"`}), inc(11, "n", "1")}},
					{coll: "a", id: "18", changes: []change.Change{set(10, map[string]string{"s": `"p2"`})}},
				},
				batch: []twinWrite{
					{coll: "a", id: "1", changes: []change.Change{set(10, map[string]string{"s": `"x"`})}},
					{coll: "a", id: "2", changes: []change.Change{set(10, map[string]string{"s": `"y"`})}},
					{coll: "a", id: "3", changes: []change.Change{unset(10, "s")}},
					{coll: "a", id: "4", changes: []change.Change{set(10, map[string]string{"n": "5", "s": `"z"`})}},
					{coll: "a", id: "5", changes: []change.Change{inc(10, "n", "3"), inc(11, "n", "-1")}},
					{coll: "a", id: "6", changes: []change.Change{inc(10, "n", "2")}},
					{coll: "a", id: "7", changes: []change.Change{inc(10, "f", "0.1"), inc(11, "f", "0.2")}},
					{coll: "a", id: "8", changes: []change.Change{inc(10, "f", "1.5"), inc(11, "r", "0.25"), inc(12, "big", "9007199254740993")}},
					{coll: "a", id: "9", changes: []change.Change{set(10, map[string]string{"j": `{"a":[1,{"b":null}]}`, "js": "[1,2]"}), unset(11, "t")}},
					{coll: "a", id: "10", changes: []change.Change{set(10, map[string]string{"j": "null", "js": "null", "t": `"hello"`})}},
					{coll: "a", id: "11", changes: []change.Change{set(10, map[string]string{"d": "12.345", "c": `"ab"`, "ts": ts,
						"u": `"b1eebc99-9c0b-4ef8-bb6d-6bb9bd380a12"`, "mood": `"ok"`, "pos": "5", "arr": `"{3}"`, "flag": flag})}},
					{coll: "a", id: "12", changes: []change.Change{inc(10, "n", "1"), del(11)}},
					{coll: "a", id: "13", changes: []change.Change{put(10, full("13")), inc(11, "n", "1")}},
					{coll: "a", id: "14", changes: []change.Change{set(10, map[string]string{"s": `"gone"`})}},
					{coll: "a", id: "15", changes: []change.Change{inc(10, "n", "1")}},
					{coll: "a", id: "16", changes: []change.Change{jsonPatch(t, 10, `{"$push":{"j.tags":"y"}}`)}},
					{coll: "a", id: "17", changes: []change.Change{set(10, map[string]string{"s": `"p1"`}), inc(11, "n", "1"), inc(12, "n", "1")}, skip: 2},
					{coll: "a", id: "18", changes: []change.Change{set(10, map[string]string{"s": `"p2"`})}, skip: 1},
					{coll: "a", id: "19", changes: []change.Change{jsonPatch(t, 10, `{"$push":{"j.tags":"y"}}`)}},
					// A second collection over the same table: rows 1 and 5
					// again, in the same shapes, after collection a's
					// patches; both increments of row 5 must count.
					{coll: "b", id: "1", changes: []change.Change{set(10, map[string]string{"s": `"other"`})}},
					{coll: "b", id: "5", changes: []change.Change{inc(10, "n", "10")}},
					{coll: "b", id: "2", changes: []change.Change{inc(10, "n", "1")}},
					// Row 20's first patch (b) makes a group after the
					// second patches' group that its second (c) joins: the
					// groups run round by round all the same.
					{coll: "b", id: "20", changes: []change.Change{set(10, map[string]string{"n": "100"})}},
					{coll: "c", id: "20", changes: []change.Change{inc(10, "n", "1")}},
				},
			},
			{
				name: "text key",
				ddl: map[string]string{
					"postgres": "CREATE TABLE %[1]s (id varchar(64) PRIMARY KEY, v text, m bigint)",
					"mysql":    "CREATE TABLE %[1]s (id varchar(64) COLLATE utf8mb4_nopad_bin PRIMARY KEY, v text, m bigint)",
				},
				seed: map[string]map[string]string{
					"a": {"id": `"a"`, "v": `"1"`, "m": "1"}, "A": {"id": `"A"`, "v": `"2"`, "m": "null"},
					"b": {"id": `"b"`, "v": "null", "m": "3"}, "é": {"id": `"é"`, "v": `"4"`, "m": "4"},
				},
				batch: []twinWrite{
					{coll: "a", id: "a", changes: []change.Change{set(10, map[string]string{"v": `"lower"`})}},
					{coll: "a", id: "A", changes: []change.Change{set(10, map[string]string{"v": `"upper"`}), inc(11, "m", "2")}},
					{coll: "a", id: "b", changes: []change.Change{inc(10, "m", "5")}},
					{coll: "a", id: "é", changes: []change.Change{set(10, map[string]string{"v": `"accent"`})}},
					{coll: "a", id: "a ", changes: []change.Change{set(10, map[string]string{"v": `"pad"`})}},
					{coll: "a", id: "c", changes: []change.Change{set(10, map[string]string{"v": `"none"`})}},
				},
			},
			{
				name: "values beyond one statement",
				ddl: map[string]string{
					"postgres": "CREATE TABLE %[1]s (id bigint PRIMARY KEY, v text)",
					"mysql":    "CREATE TABLE %[1]s (id bigint PRIMARY KEY, v text)",
				},
				seed: func() map[string]map[string]string {
					m := map[string]map[string]string{}
					for i := range 40 {
						id := fmt.Sprint(i)
						m[id] = map[string]string{"id": id, "v": "null"}
					}
					return m
				}(),
				batch: func() []twinWrite {
					var ws []twinWrite
					for i := range 42 { // 40 and 41 are missing
						ws = append(ws, twinWrite{coll: "a", id: fmt.Sprint(i), changes: []change.Change{set(10, map[string]string{"v": `"` + big + fmt.Sprint(i) + `"`})}})
					}
					return ws
				}(),
			},
			{
				// MySQL's patch statements hold myPatchRows rows each: a
				// shape's rows go in several, and each row gets its own
				// values (a CASE on the key).
				name: "more rows of a shape than a statement holds",
				ddl: map[string]string{
					"postgres": "CREATE TABLE %[1]s (id varchar(16) PRIMARY KEY, v text, m bigint)",
					"mysql":    "CREATE TABLE %[1]s (id varchar(16) COLLATE utf8mb4_nopad_bin PRIMARY KEY, v text, m bigint)",
				},
				seed: func() map[string]map[string]string {
					m := map[string]map[string]string{}
					for i := range 2*myPatchRows + 40 {
						id := fmt.Sprint("k", i)
						m[id] = map[string]string{"id": `"` + id + `"`, "v": "null", "m": fmt.Sprint(i)}
					}
					return m
				}(),
				batch: func() []twinWrite {
					var ws []twinWrite
					for i := range 2*myPatchRows + 50 { // the last ten are missing
						id := fmt.Sprint("k", i)
						c := set(10, map[string]string{"v": fmt.Sprintf(`"v%d"`, i)})
						if i%3 == 0 {
							c = inc(10, "m", fmt.Sprint(i%7))
						}
						ws = append(ws, twinWrite{coll: "a", id: id, changes: []change.Change{c}})
					}
					return ws
				}(),
			},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				tbl, ref := h.twins(t, tc.ddl)
				coll := testenv.UniqueName(t, "c")
				refColl := testenv.UniqueName(t, "r")
				var seeds, refSeeds []Write
				for id, row := range tc.seed {
					seeds = append(seeds, Write{Collection: coll + "-seed", Table: tbl, ID: id, Changes: []change.Change{put(1, row)}})
					refSeeds = append(refSeeds, Write{Collection: refColl, Table: ref, ID: id, Changes: []change.Change{put(1, row)}})
				}
				h.apply(t, seeds...)
				h.apply(t, refSeeds...)
				write := func(w twinWrite, n int) Write {
					return Write{Collection: coll + "-" + w.coll, Table: tbl, ID: w.id, Changes: w.changes[:n]}
				}
				var prior []Write
				for _, w := range tc.prior {
					prior = append(prior, write(w, len(w.changes)))
					h.applyPerRow(t, ref, w)
				}
				if len(prior) > 0 {
					h.apply(t, prior...)
				}
				var batch []Write
				var want []Result
				for _, w := range tc.batch {
					batch = append(batch, write(w, len(w.changes)))
					want = append(want, Result{Applied: len(w.changes) - w.skip, Skipped: w.skip, LastSeq: w.changes[len(w.changes)-1].Seq})
				}
				// The reference applies them in the store's order: by
				// collection, then id.
				order := make([]int, len(tc.batch))
				for i := range order {
					order[i] = i
				}
				sortByDoc(order, tc.batch)
				for _, i := range order {
					want[i].Missing = h.applyPerRow(t, ref, tc.batch[i])
				}
				got := h.apply(t, batch...)
				assert.Equal(t, want, got)
				gotRows, err := h.s.Scan(t.Context(), tbl, "", 1000)
				require.NoError(t, err)
				wantRows, err := h.s.Scan(t.Context(), ref, "", 1000)
				require.NoError(t, err)
				require.Equal(t, len(wantRows), len(gotRows))
				for i := range wantRows {
					assert.Equal(t, text(wantRows[i]), text(gotRows[i]))
				}
				// A replay of the whole batch applies nothing.
				again := h.apply(t, batch...)
				for i, r := range again {
					assert.Equal(t, Result{Skipped: len(batch[i].Changes), LastSeq: want[i].LastSeq}, r)
				}
			})
		}
	})
}

// sortByDoc sorts the indices of writes by (collection, id), bytewise.
func sortByDoc(order []int, writes []twinWrite) {
	for i := 1; i < len(order); i++ {
		for j := i; j > 0; j-- {
			a, b := writes[order[j-1]], writes[order[j]]
			if a.coll < b.coll || a.coll == b.coll && a.id <= b.id {
				break
			}
			order[j-1], order[j] = order[j], order[j-1]
		}
	}
}

// jsonPatch is a patch with operators inside the JSON column j.
func jsonPatch(t *testing.T, seq int64, body string) change.Change {
	t.Helper()
	s, err := change.NewSchema("id", []change.Column{{Name: "id", Type: change.TypeInt}, {Name: "j", Type: change.TypeJSON}})
	require.NoError(t, err)
	c, err := change.ParsePatch(s, []byte(body))
	require.NoError(t, err, body)
	c.Seq = seq
	return c
}

// TestApplyPatchErrors: a value the database rejects in a set-based
// statement is a permanent error, and nothing of the batch commits.
func TestApplyPatchErrors(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		tbl := h.describe(t, map[string]string{
			"postgres": "CREATE TABLE %s (id bigint PRIMARY KEY, n integer, s varchar(5), ts timestamp)",
			"mysql":    "CREATE TABLE %s (id bigint PRIMARY KEY, n int, s varchar(5), ts datetime)",
		})
		coll := testenv.UniqueName(t, "c")
		h.apply(t, Write{Collection: coll, Table: tbl, ID: "1", Changes: []change.Change{put(1, map[string]string{"id": "1", "n": "2147483647"})}})
		h.apply(t, Write{Collection: coll, Table: tbl, ID: "2", Changes: []change.Change{put(1, map[string]string{"id": "2", "n": "1"})}})
		cases := []struct {
			name   string
			change change.Change
		}{
			{"too long", set(2, map[string]string{"s": `"too long"`})},
			{"not a timestamp", set(2, map[string]string{"ts": `"yesterday-ish"`})},
			{"integer overflow of an int column", inc(2, "n", "1")},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				_, err := h.s.Apply(t.Context(), []Write{
					{Collection: coll, Table: tbl, ID: "2", Changes: []change.Change{set(2, map[string]string{"s": `"ok"`})}},
					{Collection: coll, Table: tbl, ID: "1", Changes: []change.Change{tc.change}},
				})
				require.Error(t, err)
				assert.True(t, IsPermanent(err), "%v should be permanent", err)
				d, seq := h.read(t, tbl, coll, "2")
				assert.Equal(t, "null", d["s"])
				assert.Equal(t, int64(1), seq)
			})
		}
	})
}

// A store patches a table that another store described: it finds the
// columns' types itself (PostgreSQL casts the values to them).
func TestApplyPatchUndescribed(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		tbl := h.describe(t, numbersDDL)
		other, err := Open(t.Context(), h.driver, h.dsn)
		require.NoError(t, err)
		defer other.Close()
		coll := testenv.UniqueName(t, "c")
		h.apply(t, Write{Collection: coll, Table: tbl, ID: "1", Changes: []change.Change{put(1, map[string]string{"id": "1", "n": "1"})}})
		res, err := other.Apply(t.Context(), []Write{
			{Collection: coll, Table: tbl, ID: "1", Changes: []change.Change{set(2, map[string]string{"s": `"x"`, "f": "2.5"}), inc(3, "n", "4")}},
			{Collection: coll, Table: tbl, ID: "2", Changes: []change.Change{set(1, map[string]string{"s": `"y"`})}},
		})
		require.NoError(t, err)
		assert.Equal(t, []Result{{Applied: 2, LastSeq: 3}, {Applied: 1, LastSeq: 1, Missing: true}}, res)
		got, seq := h.read(t, tbl, coll, "1")
		assert.Equal(t, map[string]string{"id": "1", "n": "5", "f": "2.5", "s": `"x"`, "note": "null"}, got)
		assert.Equal(t, int64(3), seq)
	})
}

// A batch whose head was applied before is planned from its tail: a
// patch after a delete applied earlier finds no row instead of failing as
// the whole run (delete, patch) would.
func TestApplyReplayedTail(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		replayedTail(t, h)
		if my, ok := h.s.(*myStore); ok && my.returning {
			t.Run("without INSERT … RETURNING", func(t *testing.T) {
				my.returning = false // MySQL's way
				replayedTail(t, h)
			})
		}
	})
}

func replayedTail(t *testing.T, h *harness) {
	tbl := h.describe(t, numbersDDL)
	coll := testenv.UniqueName(t, "c")
	h.apply(t, Write{Collection: coll, Table: tbl, ID: "1", Changes: []change.Change{put(1, map[string]string{"id": "1", "n": "1"}), del(2)}})
	res := h.apply(t,
		Write{Collection: coll, Table: tbl, ID: "1", Changes: []change.Change{del(2), inc(3, "n", "1")}},
		Write{Collection: coll, Table: tbl, ID: "2", Changes: []change.Change{put(1, map[string]string{"id": "2", "n": "2"})}},
	)
	assert.Equal(t, []Result{{Applied: 1, Skipped: 1, LastSeq: 3, Missing: true}, {Applied: 1, LastSeq: 1}}, res)
	d, seq := h.read(t, tbl, coll, "1")
	assert.Nil(t, d)
	assert.Equal(t, int64(3), seq)
	d, _ = h.read(t, tbl, coll, "2")
	assert.Equal(t, "2", d["n"])
	res = h.apply(t, Write{Collection: coll, Table: tbl, ID: "2", Changes: []change.Change{put(1, nil), inc(2, "n", "3")}})
	assert.Equal(t, []Result{{Applied: 1, Skipped: 1, LastSeq: 2}}, res)
	d, _ = h.read(t, tbl, coll, "2")
	assert.Equal(t, "5", d["n"])
}

func TestChunkLen(t *testing.T) {
	rows := func(n, width, size int) [][]any {
		out := make([][]any, n)
		for i := range out {
			for range width {
				out[i] = append(out[i], strings.Repeat("x", size))
			}
		}
		return out
	}
	cases := []struct {
		name string
		rows [][]any
		want int
	}{
		{"few small rows", rows(10, 3, 10), 10},
		{"bounded by arguments", rows(maxArgs, 3, 1), maxArgs / 3},
		{"bounded by bytes", rows(100, 2, 100_000), 5},
		{"one huge row", rows(3, 1, 2*maxStmtBytes), 1},
		{"integers", [][]any{{int64(1), 2.5}, {int64(2), nil}}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, chunkLen(tc.rows))
		})
	}
}

func TestMyPatchChunk(t *testing.T) {
	row := func(key any, vals ...any) []any { return append([]any{key}, vals...) }
	rows := func(n int, r []any) [][]any {
		out := make([][]any, n)
		for i := range out {
			out[i] = r
		}
		return out
	}
	long := strings.Repeat("x", maxStmtBytes/10)
	cases := []struct {
		name string
		rows [][]any
		want int
	}{
		{"few rows", rows(10, row("k", "v")), 10},
		{"bounded by rows", rows(3*myPatchRows, row(int64(1), 2.5)), myPatchRows},
		// A key counts once per value and once in the IN list: a row
		// of a long key and three values is 4/10 of a statement.
		{"bounded by repeated keys", rows(10, row(long, "a", "b", "c")), 2},
		{"one huge row", rows(3, row("k", strings.Repeat("x", 2*maxStmtBytes))), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, myPatchChunk(tc.rows))
		})
	}
}

func TestInsertReturning(t *testing.T) {
	for version, want := range map[string]bool{
		"10.11.19-MariaDB-0+deb12u1": true,
		"10.5.2-MariaDB":             true,
		"11.4.2-MariaDB-log":         true,
		"10.4.34-MariaDB":            false,
		"8.0.36":                     false,
		"8.4.0-commercial":           false,
	} {
		assert.Equal(t, want, insertReturning(version), version)
	}
}
