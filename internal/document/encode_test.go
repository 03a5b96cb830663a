package document

import (
	"encoding/json"
	"testing"
)

func TestEncodeFields(t *testing.T) {
	h := map[string]string{"a": `1`, "b": `"x"`, "c<": `[1,2]`, "q\"": `null`}
	for _, c := range []struct {
		fields []string
		want   string
	}{
		{nil, `{}`},
		{[]string{"b", "a"}, `{"b":"x","a":1}`},
		{[]string{"missing", "a"}, `{"a":1}`},
		{[]string{"c<", "q\""}, `{"c\u003c":[1,2],"q\"":null}`},
	} {
		got := EncodeFields(c.fields, hashGetter(h))
		if string(got) != c.want {
			t.Errorf("%q: %s, want %s", c.fields, got, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("%q: %s is not valid JSON", c.fields, got)
		}
	}
}
