package store

import (
	"encoding/json"
	"testing"
)

// plainJSONString is a shortcut of json.Unmarshal into a string: whatever
// it accepts, json.Unmarshal accepts and decodes to the same string.
func FuzzPlainJSONString(f *testing.F) {
	for _, s := range []string{`"abc"`, `""`, `"a\"b"`, `"a\\b"`, `"\u00e9"`, `"é"`, `"a"b"`, `"`, `abc`, `"tab	"`, `12`, `null`, "\"\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		got, ok := plainJSONString(string(v))
		if !ok {
			return
		}
		var want string
		if err := json.Unmarshal(v, &want); err != nil {
			t.Fatalf("plainJSONString accepted %q, which json.Unmarshal refuses: %v", v, err)
		}
		if got != want {
			t.Fatalf("plainJSONString(%q) = %q, json.Unmarshal: %q", v, got, want)
		}
	})
}

func TestPlainJSONString(t *testing.T) {
	for v, want := range map[string]bool{`"user1 field"`: true, `""`: true, `"a\"b"`: false, `"é"`: false, `"a"b"`: false, `x"`: false, `"`: false} {
		if _, ok := plainJSONString(v); ok != want {
			t.Errorf("plainJSONString(%s): ok %v, want %v", v, ok, want)
		}
	}
}
