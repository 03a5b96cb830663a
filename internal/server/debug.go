package server

import (
	"crypto/subtle"
	"net/http"
	"net/http/pprof"
	"strings"
)

// debugHandler serves the Go profiler (net/http/pprof) for operators who
// want to see where a sidecar's CPU and memory go. It listens on
// debugListen only (loopback, off by default) and, when an admin token is
// set, asks for it as a bearer token.
func debugHandler(adminToken string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if adminToken == "" {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(adminToken)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="writeback debug"`)
			http.Error(w, "the profiling endpoints need the admin token as a bearer token", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}
