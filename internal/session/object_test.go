package session

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/writeback/writeback/internal/store"
)

// objectSamples are session objects as commits write them: escapes
// (json.Marshal writes < > & as \u003c …), Unicode, nested arguments.
func objectSamples() []Object {
	return []Object{
		{ID: "a1", Queue: "tpcc/1", At: 1764380000000},
		{ID: "a2", Queue: "bank/3", At: 1, Statements: []store.Statement{{SQL: "DELETE FROM t"}}},
		{ID: "a3", Queue: "tpcc/2", At: 1764380000001, Statements: []store.Statement{
			{SQL: "UPDATE stock SET s_quantity = CASE WHEN s_quantity >= $1 + 10 THEN s_quantity - $1 ELSE s_quantity - $1 + 91 END WHERE s_w_id = $2",
				Args: []json.RawMessage{json.RawMessage(`5`), json.RawMessage(`-2.5e3`)}},
			{SQL: `INSERT INTO h (d) VALUES ($1, $2, $3, $4)`, Args: []json.RawMessage{
				json.RawMessage(`"quote \" backslash \\ tab \t é ✓ \u0001"`), json.RawMessage(`null`),
				json.RawMessage(`{"a":[1,{"b":true}],"c":false}`), json.RawMessage(`[]`)}},
		}, Affects: []string{"cust:1:2:3", "dist:1:2", "ünï<code>"}},
	}
}

// decodeObject decodes what json.Marshal(Object) writes exactly as
// json.Unmarshal does, through its own parser.
func TestDecodeObject(t *testing.T) {
	for _, want := range objectSamples() {
		text, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var fast Object
		if !fastObject(string(text), &fast) {
			t.Errorf("%s: not read by the fast parser", text)
		}
		var got, ref Object
		if err := decodeObject(string(text), &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(text, &ref); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, ref) {
			t.Errorf("%s:\n got  %+v\n want %+v", text, got, ref)
		}
	}
	// Escapes json.Marshal does not write, and bytes that are not UTF-8,
	// read as encoding/json reads them; other shapes go to encoding/json.
	for i, text := range []string{`{"id":"\ud83d\ude00","queue":"q/\ud800x\udc00\u2028","at":-3,"affects":["\ud800\ud800","\/\b\f\n\r"]}`,
		"{\"id\":\"\xff\",\"queue\":\"q\",\"at\":0}", "{\"id\":\"x\",\"queue\":\"q\",\"at\":0,\"affects\":[\"\\u00e9\xc3\"]}", `{"queue":"q/1","id":"x","at":2}`, `{"id":"x","queue":"q/1","at":2,"statements":[{"sql":"s","args":[]}]}`,
		`{"id":"x", "queue":"q/1","at":2}`, `{"id":"x","queue":"q/1","at":02}`, `{"id":"x","queue":"q/1","at":2,"extra":1}`} {
		var got, ref Object
		if i < 3 && !fastObject(text, new(Object)) {
			t.Errorf("%q: not read by the fast parser", text)
		}
		gotErr, refErr := decodeObject(text, &got), json.Unmarshal([]byte(text), &ref)
		if (gotErr == nil) != (refErr == nil) || !reflect.DeepEqual(got, ref) {
			t.Errorf("%s: got %+v, %v; want %+v, %v", text, got, gotErr, ref, refErr)
		}
	}
}

// Whatever the fast parser accepts, encoding/json reads the same way.
func FuzzDecodeObject(f *testing.F) {
	for _, o := range objectSamples() {
		text, _ := json.Marshal(o)
		f.Add(string(text))
	}
	f.Add(`{"id":"x","queue":"q","at":1,"statements":[{"sql":"\ud800","args":["\u00zz"]}]}`)
	f.Fuzz(func(t *testing.T, text string) {
		var fast Object
		if !fastObject(text, &fast) {
			return
		}
		var ref Object
		if err := json.Unmarshal([]byte(text), &ref); err != nil {
			t.Fatalf("the fast parser read %q, which encoding/json refuses: %v", text, err)
		}
		if !reflect.DeepEqual(fast, ref) {
			t.Fatalf("%q:\n fast %+v\n json %+v", text, fast, ref)
		}
	})
}

// splitObject reads a cached entry as encoding/json does (decodeEntry):
// the same fields, values and order, duplicates included.
func TestSplitObject(t *testing.T) {
	for _, text := range []string{`{}`, `{"a":1,"b":"x\"y","c":{"d":[1,2,{"e":null}]},"a":true}`, `{"\u00e9":-0.5e-3,"f":false,"g":[]}`} {
		doc, order, ok := splitObject(text)
		if !ok {
			t.Errorf("%s: not read", text)
			continue
		}
		wantDoc, wantOrder, _ := decodeEntry(text)
		if !reflect.DeepEqual(doc, wantDoc) || !reflect.DeepEqual(order, wantOrder) {
			t.Errorf("%s: got %v %q, want %v %q", text, doc, order, wantDoc, wantOrder)
		}
	}
	for _, text := range []string{`{"a": 1}`, `{"a":1}x`, `[1]`, `{"a":01}`, `{"a":1,}`} {
		if _, _, ok := splitObject(text); ok {
			t.Errorf("%s: read, want left to encoding/json", text)
		}
	}
}

// Whatever splitObject reads, encoding/json reads the same way.
func FuzzSplitObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"b":"x\"y","c":{"d":[1,2,{"e":null}]},"a":true}`, `{"c_balance":"-10.00","c_data":"\u003cx\u003e"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		doc, order, ok := splitObject(text)
		if !ok {
			return
		}
		if !json.Valid([]byte(text)) {
			t.Fatalf("splitObject read %q, which is not JSON", text)
		}
		wantDoc, wantOrder, wantOK := decodeEntry(text)
		if !wantOK || !reflect.DeepEqual(doc, wantDoc) || !reflect.DeepEqual(order, wantOrder) {
			t.Fatalf("%q: got %v %q, want %v %q (%v)", text, doc, order, wantDoc, wantOrder, wantOK)
		}
	})
}
