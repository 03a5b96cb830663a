// Command embedmember is the embedded member of the e2e crash tests: an
// application that links pkg/writeback, in a process of its own so that a
// test can pause it (SIGSTOP) and kill it (SIGKILL, or an armed
// WRITEBACK_FAULTS point) as it does a sidecar.
//
// The test drives it through a loopback front door that speaks the subset
// of the HTTP API its Go client (pkg/client) uses — GET, PUT, PATCH and
// DELETE of a document, scans, /readyz, /metrics — so that the harness handles it like a
// sidecar. That front door only calls the DB: every read and write runs
// pkg/writeback's code, near cache and leases included.
//
//	embedmember -config writeback.yaml -listen 127.0.0.1:9000 [-id name] [-appliers]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/writeback/writeback/pkg/client"
	"github.com/writeback/writeback/pkg/writeback"
)

func main() {
	cfg := flag.String("config", "", "the sidecars' writeback YAML file")
	listen := flag.String("listen", "127.0.0.1:0", "the test's front door")
	id := flag.String("id", "", "the member's instance id (default: writeback's own)")
	appliers := flag.Bool("appliers", false, "run the appliers in this process")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reg := prometheus.NewRegistry()
	db, err := writeback.Open(context.Background(), writeback.Options{
		ConfigFile: *cfg, InstanceID: *id, Appliers: *appliers, Registry: reg, Logger: log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedmember:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "embedmember: %s open (appliers %v)\n", db.InstanceID(), *appliers)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /v1/docs/{coll}/{id}", func(w http.ResponseWriter, r *http.Request) {
		doc, etag, err := db.Get(r.Context(), r.PathValue("coll"), r.PathValue("id"))
		if err != nil {
			fail(w, err)
			return
		}
		w.Header().Set("ETag", etag)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
	mux.HandleFunc("PATCH /v1/docs/{coll}/{id}", func(w http.ResponseWriter, r *http.Request) {
		ops, err := io.ReadAll(r.Body)
		if err != nil {
			fail(w, err)
			return
		}
		seq, err := db.Patch(r.Context(), r.PathValue("coll"), r.PathValue("id"), json.RawMessage(ops))
		if err != nil {
			fail(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"seq":` + strconv.FormatInt(seq, 10) + `}`))
	})
	mux.HandleFunc("PUT /v1/docs/{coll}/{id}", func(w http.ResponseWriter, r *http.Request) {
		doc, err := io.ReadAll(r.Body)
		if err != nil {
			fail(w, err)
			return
		}
		seq, err := db.Put(r.Context(), r.PathValue("coll"), r.PathValue("id"), json.RawMessage(doc))
		wrote(w, seq, err)
	})
	mux.HandleFunc("DELETE /v1/docs/{coll}/{id}", func(w http.ResponseWriter, r *http.Request) {
		seq, err := db.Delete(r.Context(), r.PathValue("coll"), r.PathValue("id"))
		wrote(w, seq, err)
	})
	mux.HandleFunc("GET /v1/docs/{coll}", func(w http.ResponseWriter, r *http.Request) {
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		docs, err := db.Scan(r.Context(), r.PathValue("coll"), r.URL.Query().Get("from"), limit)
		if err != nil {
			fail(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(client.ScanResult{Docs: docs})
	})
	err = http.ListenAndServe(*listen, mux)
	fmt.Fprintln(os.Stderr, "embedmember:", err)
	os.Exit(1)
}

// wrote answers a write: its seq, or err.
func wrote(w http.ResponseWriter, seq int64, err error) {
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"seq":` + strconv.FormatInt(seq, 10) + `}`))
}

// fail answers err as the HTTP API would: the DB's errors are already
// *client.Error classified as its answers.
func fail(w http.ResponseWriter, err error) {
	var ce *client.Error
	if !errors.As(err, &ce) {
		ce = &client.Error{StatusCode: http.StatusServiceUnavailable, Code: client.CodeUnavailable, Message: err.Error()}
	}
	var body client.ErrorBody
	body.Error.Code, body.Error.Message, body.Error.Retry = ce.Code, ce.Message, ce.Retry
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ce.StatusCode)
	_ = json.NewEncoder(w).Encode(body)
}
