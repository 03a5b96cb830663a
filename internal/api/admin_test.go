package api_test

import (
	"net/http"
	"testing"

	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/pkg/client"
)

// With auth.adminToken set, the administrative endpoints — flush and the
// dead letters, of documents and of queues — take only the admin token:
// the normal token is a 403 naming the admin token, no or a wrong token a
// 401. Every other endpoint takes either token.
func TestAdminToken(t *testing.T) {
	w := newWorld(t, opts{token: "user-tok", sessions: true, edit: func(c *config.Config) { c.Auth.AdminToken = "admin-tok" }})
	admin := []struct{ method, path, body string }{
		{"POST", "/v1/flush", `{"timeout":"5s"}`},
		{"GET", "/v1/deadletters", ""},
		{"POST", "/v1/deadletters/replay", `{"all":true}`},
		{"POST", "/v1/deadletters/drop", `{"all":true}`},
		{"POST", "/v1/queues/flush", `{"timeout":"5s"}`},
		{"GET", "/v1/queues/deadletters", ""},
		{"POST", "/v1/queues/deadletters/replay", `{"all":true}`},
		{"POST", "/v1/queues/deadletters/drop", `{"all":true}`},
	}
	for _, e := range admin {
		t.Run(e.method+" "+e.path, func(t *testing.T) {
			w.do(t, e.method, e.path, e.body, "Authorization", "Bearer user-tok").
				isError(t, "the normal token", http.StatusForbidden, client.CodeForbidden, "this endpoint needs the admin token")
			w.do(t, e.method, e.path, e.body, "Authorization", "").
				isError(t, "no token", http.StatusUnauthorized, client.CodeUnauthenticated, "missing or wrong bearer token")
			w.do(t, e.method, e.path, e.body, "Authorization", "Bearer admin-tox").
				isError(t, "a wrong token", http.StatusUnauthorized, client.CodeUnauthenticated, "missing or wrong bearer token")
			w.do(t, e.method, e.path, e.body, "Authorization", "Bearer admin-tok").ok(t, "the admin token", nil)
		})
	}
	t.Run("other endpoints take either token", func(t *testing.T) {
		for _, tok := range []string{"user-tok", "admin-tok"} {
			w.do(t, "PUT", "/v1/docs/"+w.coll+"/1", `{"n":1}`, "Authorization", "Bearer "+tok).ok(t, "put", nil)
			w.do(t, "GET", "/v1/status", "", "Authorization", "Bearer "+tok).ok(t, "status", nil)
		}
	})
	t.Run("the Go client", func(t *testing.T) {
		_, err := client.New(w.url, client.WithToken("user-tok")).Flush(t.Context(), 0)
		if ce, ok := err.(*client.Error); !ok || ce.StatusCode != http.StatusForbidden || ce.Code != client.CodeForbidden {
			t.Errorf("flush with the normal token: %v; want a 403 forbidden", err)
		}
	})
}

// Without auth.adminToken, the normal token is enough for everything, as
// before.
func TestNoAdminToken(t *testing.T) {
	w := newWorld(t, opts{token: "user-tok"})
	w.do(t, "POST", "/v1/flush", `{"timeout":"5s"}`).ok(t, "flush with the normal token", nil)
	w.do(t, "GET", "/v1/deadletters", "").ok(t, "dead letters with the normal token", nil)
}
