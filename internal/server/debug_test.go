package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// debugListen serves the Go profiler on its own loopback listener, off by
// default; with an admin token set it asks for it.
func TestDebugListener(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(t)
	r := run(t, cfg)
	if got := r.srv.DebugAddr(); got != "" {
		t.Fatalf("DebugAddr = %q with debugListen empty: profiling must be off by default", got)
	}
	if code := r.call(t, "GET", "/debug/pprof/", "", nil); code != http.StatusNotFound {
		t.Errorf("the API listener serves /debug/pprof/: %d", code)
	}

	cfg = f.config(t)
	cfg.Writeback.InstanceID += "-debug"
	cfg.DebugListen = "127.0.0.1:0"
	cfg.Auth.AdminToken = "admin-secret"
	r = run(t, cfg)
	get := func(token string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+r.srv.DebugAddr()+"/debug/pprof/goroutine?debug=1", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("profile without the admin token: %d, want 401", code)
	}
	if code, _ := get("wrong"); code != http.StatusUnauthorized {
		t.Errorf("profile with a wrong token: %d, want 401", code)
	}
	if code, body := get("admin-secret"); code != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Errorf("profile with the admin token: %d %.80q", code, body)
	}
}
