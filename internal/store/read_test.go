package store

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/testenv"
)

// typedDDL has one column of each kind the documents carry.
var typedDDL = map[string]string{
	"postgres": `CREATE TABLE %s (id text PRIMARY KEY, n bigint, f double precision, d numeric(10,2),
		s varchar(50), j jsonb, ts timestamp, flag boolean)`,
	"mysql": `CREATE TABLE %s (id varchar(64) COLLATE utf8mb4_nopad_bin PRIMARY KEY, n bigint, f double, d decimal(10,2),
		s varchar(50), j json, ts datetime, flag tinyint(1))`,
}

func TestRead(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		tbl := h.describe(t, typedDDL)
		coll := testenv.UniqueName(t, "c")
		flag := map[string]string{"postgres": "true", "mysql": "1"}[h.driver]
		full := map[string]string{
			"id": `"doc1"`, "n": "42", "f": "0.1", "d": "12.5", "s": `"h\u00e9llo \"q\" <x>"`,
			"j": `{"a": [1, 2]}`, "ts": `"2024-01-02 03:04:05"`, "flag": flag,
		}

		t.Run("no row, no record", func(t *testing.T) {
			d, seq := h.read(t, tbl, coll, "nothing")
			assert.Nil(t, d)
			assert.Zero(t, seq)
		})

		t.Run("row and record", func(t *testing.T) {
			res := h.apply(t, Write{Collection: coll, Table: tbl, ID: "doc1", Partition: 3, Changes: []change.Change{put(7, full)}})
			assert.Equal(t, Result{Applied: 1, LastSeq: 7}, res[0])
			d, seq := h.read(t, tbl, coll, "doc1")
			assert.Equal(t, int64(7), seq)
			assert.Equal(t, map[string]string{
				"id": `"doc1"`, "n": "42", "f": "0.1", "d": "12.50", "s": `"héllo \"q\" \u003cx\u003e"`,
				"j": `{"a":[1,2]}`, "ts": `"2024-01-02 03:04:05"`, "flag": flag,
			}, d)
		})

		t.Run("nulls", func(t *testing.T) {
			nulls := map[string]string{"id": `"doc2"`, "n": "null", "f": "null", "d": "null", "s": "null", "j": "null", "ts": "null", "flag": "null"}
			h.apply(t, Write{Collection: coll, Table: tbl, ID: "doc2", Changes: []change.Change{put(1, nulls)}})
			d, seq := h.read(t, tbl, coll, "doc2")
			assert.Equal(t, int64(1), seq)
			assert.Equal(t, nulls, d)
		})

		t.Run("record without row", func(t *testing.T) {
			h.apply(t, Write{Collection: coll, Table: tbl, ID: "doc3", Changes: []change.Change{put(1, map[string]string{"id": `"doc3"`}), del(2)}})
			d, seq := h.read(t, tbl, coll, "doc3")
			assert.Nil(t, d)
			assert.Equal(t, int64(2), seq)
		})

		t.Run("row without record", func(t *testing.T) {
			h.exec(t, fmt.Sprintf("INSERT INTO %s (id, n) VALUES ('doc4', 5)", tbl.Name))
			d, seq := h.read(t, tbl, coll, "doc4")
			assert.Zero(t, seq)
			assert.Equal(t, "5", d["n"])
			// The record belongs to (collection, id): another collection
			// on the same table sees no seq.
			_, seq = h.read(t, tbl, coll+"x", "doc1")
			assert.Zero(t, seq)
		})
	})
}

func TestScanTextKeys(t *testing.T) {
	// Mixed case, accents, CJK, an emoji and a space: no two equal under a
	// case- or accent-insensitive collation (MySQL would reject them as
	// duplicate keys), but ordered differently by it than bytewise.
	keys := []string{"apple", "Banana", "cherry", "Date", "éclair", "Zebra", "zoo", "日本", "😀", "äpfel", "a b", "APRICOT", "~tilde"}
	want := slices.Clone(keys)
	slices.Sort(want) // Go compares strings bytewise
	variants := map[string]map[string]string{
		"default collation": {
			"postgres": "CREATE TABLE %s (id text PRIMARY KEY, v int)",
			"mysql":    "CREATE TABLE %s (id varchar(64) PRIMARY KEY, v int) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci",
		},
		"binary collation": {
			"postgres": `CREATE TABLE %s (id varchar(64) COLLATE "C" PRIMARY KEY, v int)`,
			"mysql":    "CREATE TABLE %s (id varchar(64) COLLATE utf8mb4_nopad_bin PRIMARY KEY, v int)",
		},
		"other collation": {
			"postgres": "CREATE TABLE %s (id varchar(64) COLLATE \"en-x-icu\" PRIMARY KEY, v int)",
			"mysql":    "CREATE TABLE %s (id varchar(64) CHARACTER SET latin1 PRIMARY KEY, v int)",
		},
	}
	eachStore(t, func(t *testing.T, h *harness) {
		for name, ddl := range variants {
			t.Run(name, func(t *testing.T) {
				if name != "binary collation" && h.driver == "mysql" {
					// Case-insensitive keys would alias documents: refused.
					_, err := h.s.Describe(t.Context(), h.table(t, ddl), "id")
					require.ErrorContains(t, err, "binary collation")
					return
				}
				if name == "other collation" && h.driver == "mysql" {
					// latin1 cannot hold CJK or emoji.
					keys := keys[:0:0]
					for _, k := range want {
						if len([]rune(k)) == len(k) || k == "éclair" || k == "äpfel" {
							keys = append(keys, k)
						}
					}
					scanAll(t, h, ddl, keys)
					return
				}
				scanAll(t, h, ddl, want)
			})
		}
	})
}

// scanAll writes keys into a new table, then pages through it 3 rows at a
// time and checks the bytewise order.
func scanAll(t *testing.T, h *harness, ddl map[string]string, sorted []string) {
	t.Helper()
	tbl := h.describe(t, ddl)
	coll := testenv.UniqueName(t, "c")
	var writes []Write
	for i, k := range sorted {
		kv := strconv.Quote(k)
		writes = append(writes, Write{Collection: coll, Table: tbl, ID: k, Changes: []change.Change{put(1, map[string]string{"id": kv, "v": strconv.Itoa(i)})}})
	}
	slices.Reverse(writes)
	h.apply(t, writes...)

	var got []string
	from := ""
	for range len(sorted) + 2 {
		docs, err := h.s.Scan(t.Context(), tbl, from, 3)
		require.NoError(t, err)
		for _, d := range docs {
			k, _ := strconv.Unquote(string(d["id"]))
			if k == from {
				continue // from is inclusive
			}
			got = append(got, k)
		}
		if len(docs) < 3 {
			break
		}
		from, _ = strconv.Unquote(string(docs[len(docs)-1]["id"]))
	}
	assert.Equal(t, sorted, got)

	docs, err := h.s.Scan(t.Context(), tbl, "a", 100)
	require.NoError(t, err)
	var tail []string
	for _, d := range docs {
		k, _ := strconv.Unquote(string(d["id"]))
		tail = append(tail, k)
	}
	i, _ := slices.BinarySearch(sorted, "a")
	assert.Equal(t, sorted[i:], tail, "scan from \"a\"")
}

// TestReadIntKeyOutOfRange reads an id that is a valid int64 but beyond the
// key column's type: there is no such row, and that is not an error.
func TestReadIntKeyOutOfRange(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		tbl := h.describe(t, map[string]string{
			"postgres": "CREATE TABLE %s (id int PRIMARY KEY, v text)",
			"mysql":    "CREATE TABLE %s (id int PRIMARY KEY, v text)",
		})
		coll := testenv.UniqueName(t, "c")
		d, seq := h.read(t, tbl, coll, "99999999999")
		assert.Nil(t, d)
		assert.Zero(t, seq)
		docs, err := h.s.Scan(t.Context(), tbl, "99999999999", 10)
		require.NoError(t, err)
		assert.Empty(t, docs)
		res := h.apply(t, Write{Collection: coll, Table: tbl, ID: "99999999999", Changes: []change.Change{set(1, map[string]string{"v": `"x"`})}})
		assert.True(t, res[0].Missing)
		_, err = h.s.Apply(t.Context(), []Write{{Collection: coll, Table: tbl, ID: "99999999999", Changes: []change.Change{put(2, map[string]string{"id": "99999999999"})}}})
		assert.True(t, IsPermanent(err), "a put beyond the key's range is the data's fault: %v", err)
	})
}

func TestScanIntKeys(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		tbl := h.describe(t, map[string]string{
			"postgres": "CREATE TABLE %s (id bigint PRIMARY KEY, v text)",
			"mysql":    "CREATE TABLE %s (id bigint PRIMARY KEY, v text)",
		})
		coll := testenv.UniqueName(t, "c")
		var writes []Write
		for _, id := range []string{"100", "-5", "9", "10", "2"} {
			writes = append(writes, Write{Collection: coll, Table: tbl, ID: id, Changes: []change.Change{put(1, map[string]string{"id": id, "v": `"x"`})}})
		}
		h.apply(t, writes...)
		ids := func(from string, limit int) []string {
			docs, err := h.s.Scan(t.Context(), tbl, from, limit)
			require.NoError(t, err)
			var out []string
			for _, d := range docs {
				out = append(out, string(d["id"]))
			}
			return out
		}
		assert.Equal(t, []string{"-5", "2", "9", "10", "100"}, ids("", 10))
		assert.Equal(t, []string{"9", "10"}, ids("9", 2))
		assert.Equal(t, []string{"100"}, ids("11", 2))
		assert.Empty(t, ids("", 0))
		assert.Empty(t, ids("9223372036854775807", 2))
		_, err := h.s.Scan(t.Context(), tbl, "abc", 2)
		assert.ErrorContains(t, err, "integer")
	})
}
