package bg

import (
	"encoding/json"
	"testing"
)

func TestListLen(t *testing.T) {
	for in, want := range map[string]int{`null`: 0, `[]`: 0, `[ ]`: 0, `["a"]`: 1, `["a","b,c","d\"],e"]`: 3, `[[1,2],{"a":[3,4]},5]`: 3, `[1, 2 ,3]`: 3} {
		var n listLen
		if err := json.Unmarshal([]byte(in), &n); err != nil || int(n) != want {
			t.Errorf("%s: %d, %v; want %d", in, n, err, want)
		}
	}
}

func TestFirstIDs(t *testing.T) {
	for _, c := range []struct {
		in    string
		n     int
		want  []string
		count int
	}{
		{``, 3, nil, 0},
		{`null`, 3, nil, 0},
		{`[]`, 3, []string{}, 0},
		{`["m1","m2","m3"]`, 2, []string{"m1", "m2"}, 3},
		{`["m1", "m2"]`, 5, []string{"m1", "m2"}, 2},
		{`["m\u0031","m2"]`, 1, []string{"m1"}, 2}, // escapes: decoded whole
	} {
		got, count, err := firstIDs(c.in, c.n)
		if err != nil || count != c.count || len(got) != len(c.want) {
			t.Errorf("%s: %q %d %v; want %q %d", c.in, got, count, err, c.want, c.count)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: %q; want %q", c.in, got, c.want)
			}
		}
	}
	if _, _, err := firstIDs(`{"a":1}`, 1); err == nil {
		t.Error("an object taken for a list")
	}
}

func TestUnquote(t *testing.T) {
	for in, want := range map[string]string{``: "", `null`: "", `""`: "", `"abc"`: "abc", `"a\"b\u00e9"`: "a\"bé"} {
		if got, err := unquote(in); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := unquote(`12`); err == nil {
		t.Error("a number taken for a string")
	}
}
