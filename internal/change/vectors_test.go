package change

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// vector is one entry of testdata/vectors.json: the shared test vectors that
// internal/change/mongovectors also runs against a MongoDB-wire server. An
// update fails with error "client" (ParsePatch refuses it) or "type" (Apply
// refuses it), or else leaves want. ferretdb, when set, says how FerretDB
// deviates from MongoDB's documented behavior; want is MongoDB's.
type vector struct {
	Name     string            `json:"name"`
	Doc      json.RawMessage   `json:"doc"`
	Update   json.RawMessage   `json:"update"`
	Updates  []json.RawMessage `json:"updates"`
	Want     json.RawMessage   `json:"want"`
	Error    string            `json:"error"`
	FerretDB string            `json:"ferretdb"`
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatalf("testdata/vectors.json: %v", err)
	}
	return vs
}

func docSchema(t testing.TB) *Schema {
	t.Helper()
	s, err := NewDynamicSchema("_id")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// docOf parses a document for the dynamic schema s, with id "v".
func docOf(t testing.TB, s *Schema, body string) Doc {
	t.Helper()
	c, err := ParsePut(s, "v", []byte(body))
	if err != nil {
		t.Fatalf("document %s: %v", body, err)
	}
	return c.Doc
}

func TestVectors(t *testing.T) {
	s := docSchema(t)
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			updates := v.Updates
			if v.Update != nil {
				updates = []json.RawMessage{v.Update}
			}
			doc := docOf(t, s, string(v.Doc))
			var changes []Change
			for _, u := range updates {
				c, err := ParsePatch(s, u)
				if err != nil {
					var ce *Error
					if v.Error == "client" && errors.As(err, &ce) {
						return
					}
					t.Fatalf("ParsePatch(%s): %v", u, err)
				}
				changes = append(changes, c)
			}
			if v.Error == "client" {
				t.Fatal("ParsePatch accepted the update; want a client error")
			}
			got, err := ApplyAll(doc, changes)
			if v.Error == "type" {
				var te *TypeError
				if !errors.As(err, &te) {
					t.Fatalf("got %v, %v; want a *TypeError", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := docOf(t, s, string(v.Want))
			if !docEqual(got, want) {
				t.Fatalf("got  %s\nwant %s", docString(got), docString(want))
			}
			// The compacted and the idempotent forms end in the same place.
			if c, err := ApplyAll(doc, CompactDoc(changes)); err != nil || !docEqual(c, want) {
				t.Errorf("CompactDoc: got %s, %v", docString(c), err)
			}
			conv, err := Idempotent(doc, changes)
			if err != nil {
				t.Fatalf("Idempotent: %v", err)
			}
			if c, err := ApplyAll(doc, conv); err != nil || !docEqual(c, want) {
				t.Errorf("Idempotent: got %s, %v", docString(c), err)
			}
		})
	}
}

// docString renders a document with sorted top-level fields.
func docString(d Doc) string {
	if d == nil {
		return "<nil>"
	}
	b := []byte{'{'}
	for i, k := range sortedKeys(d) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = append(b, d[k]...)
	}
	return string(append(b, '}'))
}
