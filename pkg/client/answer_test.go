package client

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The sidecar's multi-read answers take the shortcut and decode as
// json.Unmarshal decodes them.
func TestCacheManyAnswer(t *testing.T) {
	for _, body := range []string{
		"{\"session\":\"s1\",\"values\":[{\"a\":1},null,\"x\"],\"peeked\":[[1,2]],\"keep\":{\"item:1\":5000,\"item:2\":0}}\n",
		`{"values":[]}`,
		`{"values":[null],"keep":{}}`,
	} {
		var fast CacheManyResult
		if !cacheManyAnswer([]byte(body), &fast) {
			t.Fatalf("cacheManyAnswer(%q) did not take it", body)
		}
		var want CacheManyResult
		if err := json.Unmarshal([]byte(body), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Errorf("cacheManyAnswer(%q) = %+v, json.Unmarshal: %+v", body, fast, want)
		}
	}
	for _, body := range []string{`{"values":[1] }`, `{"values":[1],"other":1}`, `{"session":"a\"b","values":[]}`, `{"values":[1],"keep":{"k":1.5}}`, "{\"session\":\"\xff\",\"values\":[]}"} {
		if cacheManyAnswer([]byte(body), new(CacheManyResult)) {
			t.Errorf("cacheManyAnswer(%q) took it; it is json.Unmarshal's", body)
		}
	}
}

// FuzzCacheManyAnswer: what the shortcut takes, json.Unmarshal takes and
// decodes the same.
func FuzzCacheManyAnswer(f *testing.F) {
	for _, s := range []string{"{\"session\":\"s\",\"values\":[1,null],\"peeked\":[\"x\"],\"keep\":{\"k\":1}}\n", `{"values":[]}`, `{"values":[{"a":[1]}],"keep":{"a":1,"a":2}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast CacheManyResult
		if !cacheManyAnswer(body, &fast) {
			return
		}
		var want CacheManyResult
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("cacheManyAnswer took %q, which json.Unmarshal refuses: %v", body, err)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Fatalf("cacheManyAnswer(%q) = %+v, json.Unmarshal: %+v", body, fast, want)
		}
	})
}
