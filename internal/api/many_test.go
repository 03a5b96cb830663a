package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/writeback/writeback/pkg/client"
)

// GET /v1/docs/{c}?ids=… answers the documents in the order asked, hits,
// misses and missing ones (null) alike, each as GET of the one document
// answers it; one bad id is a 400 for the whole request.
func TestGetMany(t *testing.T) {
	w := newWorld(t, opts{})
	w.exec(fmt.Sprintf("INSERT INTO %s (id, n, s) VALUES (1, 1, 'one'), (2, 2, 'two'), (3, 3, 'three')", w.coll))
	w.do(t, "GET", "/v1/docs/"+w.coll+"/2", "").ok(t, "get 2 (fills the cache)", nil)
	w.do(t, "PATCH", "/v1/docs/"+w.coll+"/3", `{"$inc":{"n":10}}`, "Content-Type", "application/json").ok(t, "patch 3", nil)
	var res client.ManyResult
	w.do(t, "GET", "/v1/docs/"+w.coll+"?ids=3,9,1&id=2", "").ok(t, "multi-read", &res)
	want := []string{`{"id":3,"n":13,"s":"three"}`, `null`, `{"id":1,"n":1,"s":"one"}`, `{"id":2,"n":2,"s":"two"}`}
	if len(res.Docs) != len(want) {
		t.Fatalf("%d documents; want %d", len(res.Docs), len(want))
	}
	for i, d := range res.Docs {
		if string(d) != want[i] {
			t.Errorf("document %d: %s; want %s", i, d, want[i])
		}
		if want[i] == "null" {
			continue
		}
		var one json.RawMessage
		var id struct{ ID int }
		_ = json.Unmarshal(d, &id)
		w.do(t, "GET", fmt.Sprintf("/v1/docs/%s/%d", w.coll, id.ID), "").ok(t, "get one", &one)
		if string(one) != string(d) {
			t.Errorf("the multi-read's document %s differs from GET's %s", d, one)
		}
	}
	for _, q := range []string{"?ids=1,x,2", "?ids=1,,2", "?id="} {
		w.do(t, "GET", "/v1/docs/"+w.coll+q, "").isError(t, "multi-read "+q, http.StatusBadRequest, client.CodeInvalidArgument, "")
	}
}
