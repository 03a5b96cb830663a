package session

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/writeback/writeback/pkg/client"
)

// commitSamples are commits as the Go client sends them: escapes
// (json.Marshal writes < > & as \u003c …), Unicode, every kind of
// argument, patches and values, and fields left out.
func commitSamples() []client.Commit {
	return []client.Commit{
		{},
		{Queue: "tpcc/1"},
		{Affects: []string{"a"}},
		{Queue: "tpcc/2", Statements: []client.Statement{
			{SQL: "UPDATE stock SET s_quantity = CASE WHEN s_quantity >= $1 + 10 THEN s_quantity - $1 ELSE s_quantity - $1 + 91 END WHERE s_w_id = $2",
				Args: []any{5, -2.5e3}},
			{SQL: "DELETE FROM t"},
			{SQL: `INSERT INTO h (d) VALUES ($1, $2, $3, $4, $5)`, Args: []any{
				"quote \" backslash \\ tab \t é ✓ \u0001 <&>", nil, map[string]any{"a": []any{1, map[string]any{"b": true}}, "c": false}, []any{}, json.RawMessage(`{"x": [1, 2]}`)}},
		}, Cache: []client.CacheChange{
			{Key: "dist:1:2", Patch: map[string]any{"$set": map[string]any{"d_next_o_id": 3001}}},
			{Key: "lines:1:2:3", Set: json.RawMessage(`[{"ol_number":1,"ol_amount":12.50}]`)},
			{Key: "nord:1:2", Delete: true},
			{Key: "both", Patch: map[string]any{}, Set: "v", Delete: true},
			{Key: "null", Patch: json.RawMessage(`null`)},
		}, Affects: []string{"cust:1:2:3", "ünï<code>"}},
	}
}

// DecodeCommit reads what the Go client sends with its own parser, and
// exactly as encoding/json does.
func TestDecodeCommit(t *testing.T) {
	for _, c := range commitSamples() {
		body, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if !fastCommit(string(body), new(CommitRequest)) {
			t.Errorf("%s: not read by the fast parser", body)
		}
		got, err := DecodeCommit(body)
		if err != nil {
			t.Fatal(err)
		}
		var ref CommitRequest
		if err := json.Unmarshal(body, &ref); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, ref) {
			t.Errorf("%s:\n got  %+v\n want %+v", body, got, ref)
		}
	}
}

// Other shapes are encoding/json's to read or refuse: spaces, fields out
// of order or in another case, empty lists; unknown fields, a second
// value and what is not JSON are refused.
func TestDecodeCommitOtherShapes(t *testing.T) {
	for _, body := range []string{
		`{ "queue": "q/1" }`, `{"affects":["a"],"queue":"q/1"}`, `{"Queue":"q/1"}`, `{"statements":[]}`,
		`{"statements":[{"sql":"s","args":[]}]}`, `{"cache":[{"key":"k","delete":false}]}`, `{"queue":"q/1"}` + "\n",
		`{"queue":null}`, `{"queue":"a","queue":"b"}`,
	} {
		got, err := DecodeCommit([]byte(body))
		var ref CommitRequest
		refErr := json.Unmarshal([]byte(body), &ref)
		if err != nil || refErr != nil || !reflect.DeepEqual(got, ref) {
			t.Errorf("%s: got %+v, %v; want %+v, %v", body, got, err, ref, refErr)
		}
	}
	for _, tc := range []struct{ body, msg string }{
		{`{"queue":"q/1","extra":1}`, `unknown field "extra"`},
		{`{"queue":"q/1"}{}`, ErrTrailing.Error()},
		{`{"queue":"q/1"`, "unexpected EOF"},
		{`{"statements":[{"sql":"s","args":[01]}]}`, "invalid character"},
		{`[]`, "cannot unmarshal array"},
		{``, "EOF"},
	} {
		if _, err := DecodeCommit([]byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: %v; want an error saying %q", tc.body, err, tc.msg)
		}
	}
}

// Whatever the fast parser accepts, encoding/json reads the same way,
// strictly (no unknown field, one value).
func FuzzDecodeCommit(f *testing.F) {
	for _, c := range commitSamples() {
		body, _ := json.Marshal(c)
		f.Add(string(body))
	}
	f.Add(`{"statements":[{"sql":"\ud800","args":["\u00zz"]}],"cache":[{"key":"k","set":{"a":[1,{"b":null}]},"delete":true}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		var fast CommitRequest
		if !fastCommit(body, &fast) {
			return
		}
		var ref CommitRequest
		dec := json.NewDecoder(bytes.NewReader([]byte(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ref); err != nil || dec.More() {
			t.Fatalf("the fast parser read %q, which encoding/json refuses: %v", body, err)
		}
		if !reflect.DeepEqual(fast, ref) {
			t.Fatalf("%q:\n fast %+v\n json %+v", body, fast, ref)
		}
	})
}
