package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/writeback/writeback/benchmarks/bench"
)

// BenchmarkTransport sends a commit-sized request and reads a multi-read-
// sized answer from a net/http server (the sidecar's) over loopback, with
// the package's pool and with net/http's transport, from 10 goroutines as
// the TPC-C benchmark's terminals do. cpu-µs/op is this process's CPU per
// request, client and server together (go test -bench Transport -run ^$
// ./pkg/client).
func BenchmarkTransport(b *testing.B) {
	body := `{"queue":"w1","statements":[` + strings.Repeat(`{"sql":"UPDATE stock SET s_quantity = $1 WHERE s_w_id = $2 AND s_i_id = $3","args":[1,2,3]},`, 15) + `{"sql":"x"}]}`
	ans := `{"values":[` + strings.Repeat(`{"s_quantity":40,"s_ytd":0,"s_order_cnt":0,"s_remote_cnt":0,"s_data":"abcdefghijklmnopqrstuvwxyz"},`, 15) + `null]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, ans)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name string
		c    *Client
	}{
		{"pool", New(srv.URL)},
		{"net-http", New(srv.URL, WithHTTPClient(sharedClient))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetParallelism(5) // × GOMAXPROCS (2 here): 10 goroutines
			start := bench.TakeCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := &request{method: http.MethodPost, url: srv.URL + "/v1/sessions/s/commit", body: []byte(body)}
				for pb.Next() {
					if _, err := tc.c.do(context.Background(), r); err != nil {
						b.Error(err)
						return
					}
				}
			})
			used := bench.TakeCPU().Sub(start)["self"] // Linux only; 0 elsewhere
			b.ReportMetric(float64(used.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
