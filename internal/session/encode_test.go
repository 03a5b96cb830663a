package session

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/store"
)

// encodeObject writes what json.Marshal writes, for objects of every
// shape and arguments that need escaping or compacting.
func TestEncodeObject(t *testing.T) {
	for _, o := range []Object{
		{},
		{ID: "s1", Queue: "tpcc/1", At: 1700000000000},
		{ID: "s1", Queue: "q", At: -5, Affects: []string{"a:1", "b<&>2", "é\u2028", "q\"uote\\"}},
		{ID: "x", Queue: "q/1", At: 7, Statements: []store.Statement{
			{SQL: "UPDATE t SET a = $1 WHERE id = $2", Args: []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`"x"`)}},
			{SQL: "DELETE FROM t"},
			{SQL: "INSERT INTO t VALUES ($1, $2, $3, $4)", Args: []json.RawMessage{
				json.RawMessage(` { "a" : [1, 2] } `), json.RawMessage(`"<b>&"`), json.RawMessage(`"é\u2028"`), json.RawMessage(`null`), nil,
			}},
			{SQL: "SELECT '\t<tab>'", Args: []json.RawMessage{json.RawMessage(`12.50`), json.RawMessage(`true`), json.RawMessage(`[]`)}},
		}},
	} {
		want, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeObject(o)
		if err != nil || string(got) != string(want) {
			t.Errorf("encodeObject(%+v) = %s, %v\nwant %s", o, got, err, want)
		}
		var back Object
		if err := decodeObject(string(got), &back); err != nil {
			t.Errorf("%s does not decode: %v", got, err)
		}
	}
	for _, bad := range []string{`{`, `1 2`, `"unterminated`, `tru`, `{"a":}`} {
		o := Object{ID: "x", Statements: []store.Statement{{SQL: "s", Args: []json.RawMessage{json.RawMessage(bad)}}}}
		if _, err := encodeObject(o); err == nil {
			t.Errorf("an argument %q encoded; json.Marshal refuses it", bad)
		}
	}
}

// FuzzEncodeObject: encodeObject and json.Marshal agree on every object
// (bytes and refusals).
func FuzzEncodeObject(f *testing.F) {
	f.Add("s1", "tpcc/1", int64(17), "UPDATE t SET a = $1", `1`, `"x"`, "k:1")
	f.Add("", "", int64(0), "", ` { "a" : 1 }`, `"<&>"`, "é")
	f.Fuzz(func(t *testing.T, id, queue string, at int64, sql, a1, a2, key string) {
		o := Object{ID: id, Queue: queue, At: at, Statements: []store.Statement{{SQL: sql, Args: []json.RawMessage{json.RawMessage(a1), json.RawMessage(a2)}}}, Affects: []string{key}}
		want, werr := json.Marshal(o)
		got, gerr := encodeObject(o)
		if (werr == nil) != (gerr == nil) || string(got) != string(want) {
			t.Fatalf("encodeObject = %q, %v; json.Marshal = %q, %v", got, gerr, want, werr)
		}
	})
}

// patchEntryBefore is patchEntry as it encoded the fields with
// encoding/json (json.Marshal of each key, json.Compact of each value):
// the reference patchEntry's bytes are held to.
func patchEntryBefore(text string, c change.Change) (string, bool) {
	out, keys, ok := patchedFields(text, c)
	if !ok {
		return "", false
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		var cv bytes.Buffer
		if json.Compact(&cv, out[k]) == nil {
			b.Write(cv.Bytes())
		} else {
			b.Write(out[k])
		}
	}
	b.WriteByte('}')
	return b.String(), true
}

// FuzzPatchEntry: patchEntry writes what it wrote with encoding/json, for
// any entry and patch.
func FuzzPatchEntry(f *testing.F) {
	f.Add(`{"id":7,"balance":10,"name":"x"}`, `{"$inc":{"balance":-3}}`)
	f.Add(`{"b":1, "a": "<&>"}`, `{"$set":{"z":{"k": [1, 2]},"é<":"\u2028"},"$unset":{"a":""}}`)
	f.Add(`{"a":{"b":[1]}}`, `{"$push":{"a.b":2}}`)
	f.Fuzz(func(t *testing.T, entry, body string) {
		c, err := change.ParsePatch(patchSchema, []byte(body))
		if err != nil {
			return
		}
		got, gok := patchEntry(entry, c)
		want, wok := patchEntryBefore(entry, c)
		if got != want || gok != wok {
			t.Fatalf("patchEntry(%s, %s) = %s %v; with encoding/json %s %v", entry, body, got, gok, want, wok)
		}
	})
}
