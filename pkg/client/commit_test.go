package client

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"
)

// appendCommit writes json.Marshal's bytes for every commit, and refuses
// what it refuses.
func TestAppendCommit(t *testing.T) {
	var nilMap map[string]any
	for _, c := range []Commit{
		{},
		{Queue: "bank/1"},
		{Cache: []CacheChange{{Key: "k", Delete: true}}},
		{Queue: "tpcc/1", Statements: []Statement{
			{SQL: "UPDATE stock SET s_quantity = s_quantity - $1 WHERE s_quantity >= $1 AND s_i_id = $2", Args: []any{int64(3), uint8(7)}},
			{SQL: "SELECT 1"},
			{SQL: "INSERT INTO h VALUES ($1, $2, $3, $4, $5, $6, $7)", Args: []any{"é <&> \"q\" \\ \t", nil, 1.5e-7, []byte("bytes"),
				json.RawMessage(` {"a" : [1, 2]} `), time.Date(2026, 11, 29, 17, 0, 0, 5, time.UTC), map[string]any{"z": 1, "a": []any{true, nil}}}},
		}, Cache: []CacheChange{
			{Key: "dist:1:2", Patch: map[string]any{"$set": map[string]any{"d_next_o_id": 3001}}},
			{Key: "lines", Set: json.RawMessage(`[{"n":1}]`)},
			{Key: "typed nil", Patch: nilMap},
			{Key: "all", Patch: map[string]any{}, Set: "v", Delete: true},
		}, Affects: []string{"stocklvl:1:2", "ü"}},
		{Statements: []Statement{{SQL: "x", Args: []any{}}}, Cache: []CacheChange{}, Affects: []string{}},
	} {
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendCommit(nil, c)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("appendCommit:\n got  %s, %v\n want %s", got, err, want)
		}
	}
	for _, bad := range []any{math.NaN(), make(chan int), json.RawMessage(`{`), func() {}} {
		c := Commit{Queue: "q/1", Statements: []Statement{{SQL: "x", Args: []any{bad}}}}
		if _, err := json.Marshal(c); err == nil {
			t.Fatalf("json.Marshal encodes %v", bad)
		}
		if _, err := encodeCommit(c); err == nil {
			t.Errorf("a commit with argument %T encoded", bad)
		}
		c = Commit{Queue: "q/1", Cache: []CacheChange{{Key: "k", Set: bad}}}
		if _, err := encodeCommit(c); err == nil {
			t.Errorf("a commit with value %T encoded", bad)
		}
	}
}
