package change

import (
	"errors"
	"testing"
)

// FuzzParse feeds arbitrary bodies to the parsers: they must either accept
// (and then the change must encode, decode and apply without error) or
// reject with a client error — never panic, never fail otherwise.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"$set":{"name":"x","n":1}}`, `{"$inc":{"n":-5,"f":0.25}}`, `{"$unset":{"name":""}}`,
		`{"name":"a","req":"b"}`, `{`, `[]`, `{"$inc":{"n":"1"}}`, `{"$set":{"j":{"a":[1,{"b":null}]}}}`,
		`{"$inc":{"n":1e400}}`, "{\"$set\":{\"name\":\"\xff\"}}",
	} {
		f.Add([]byte(s))
	}
	s := testSchema(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, parse := range []func([]byte) (Change, error){
			func(b []byte) (Change, error) { return ParsePatch(s, b) },
			func(b []byte) (Change, error) { return ParsePut(s, "1", b) },
		} {
			c, err := parse(body)
			if err != nil {
				var ce *Error
				if !errors.As(err, &ce) {
					t.Fatalf("non-client error %v", err)
				}
				continue
			}
			c.Seq = 1
			d, err := Decode("1|0|" + string(Encode(c)))
			if err != nil {
				t.Fatalf("accepted change does not round-trip: %v", err)
			}
			base, _ := ParsePut(s, "1", []byte(`{"req":"r","n":0,"f":0}`))
			if _, err := ApplyAll(base.Doc, []Change{d}); err != nil {
				t.Fatalf("accepted change does not apply: %v", err)
			}
			if _, err := Compact([]Change{d, d}); err != nil {
				t.Fatalf("accepted change does not compact: %v", err)
			}
		}
	})
}
