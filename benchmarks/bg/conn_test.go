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
