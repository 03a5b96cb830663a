package buffer

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/change"
)

// Combined rounds give every call exactly its own writes' results, in
// order, under concurrency; the counters stay exact.
func TestCombinedWrites(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	b.Combine = true
	const callers, each = 16, 40
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last int64
			for k := range each {
				id := fmt.Sprintf("%d", c)
				put, _ := change.ParsePut(s, id, []byte(fmt.Sprintf(`{"n":%d}`, k)))
				rs, errs := b.WriteBatch(ctx, []WriteRequest{{Coll: "c", ID: id, Change: put, Schema: s, Options: WriteOptions{TTL: time.Minute}}})
				if errs[0] != nil || rs[0].Outcome != Buffered {
					t.Errorf("caller %d write %d: %v %v", c, k, rs[0].Outcome, errs[0])
					return
				}
				if rs[0].Seq <= last {
					t.Errorf("caller %d: seq %d after %d: a combined round mixed up the results", c, rs[0].Seq, last)
				}
				last = rs[0].Seq
			}
			r, err := b.Read(ctx, "c", fmt.Sprint(c), NewToken())
			if err != nil || !r.Hit || string(r.Doc["n"]) != fmt.Sprint(each-1) {
				t.Errorf("caller %d reads %v %v; want its last write n=%d", c, r.Doc, err, each-1)
			}
		}()
	}
	wg.Wait()
	// Every round ends and gives its slot back, even the empty ones (a
	// round that found its calls taken by another); a slot leaked would
	// stop combining for good. The last round may still be finishing.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		rounds, waiting := b.comb.Pending()
		if rounds == 0 && waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rounds running and %d calls waiting after every call returned", rounds, waiting)
		}
	}
	st, err := b.Stats(ctx)
	if err != nil || st.PendingChanges != callers*each || st.PendingDocuments != callers {
		t.Fatalf("stats %+v %v; want %d changes of %d documents", st, err, callers*each, callers)
	}
}

// BenchmarkWriteBatchConcurrent: 64 goroutines each buffering one write
// per call, as concurrent HTTP requests do, with and without combining. It
// reports Redis's own time per buffered write (INFO commandstats: the
// EVALSHA time spent while it ran, so run it on a Redis nothing else uses:
// WRITEBACK_TEST_REDIS).
func BenchmarkWriteBatchConcurrent(bm *testing.B) {
	for _, combine := range []bool{false, true} {
		bm.Run(fmt.Sprintf("combine=%v", combine), func(bm *testing.B) {
			b, s, ctx := newTestBuffer(bm), schema(bm), context.Background()
			b.Combine = combine
			var next atomic.Int64
			bm.SetParallelism(32)
			before := evalshaUsec(bm, b)
			defer func() {
				bm.ReportMetric(float64(evalshaUsec(bm, b)-before)/float64(bm.N), "redis-µs/write")
			}()
			bm.ResetTimer()
			bm.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := fmt.Sprint(next.Add(1) % 1000)
					put, _ := change.ParsePut(s, id, []byte(`{"n":1}`))
					_, errs := b.WriteBatch(ctx, []WriteRequest{{Coll: "c", ID: id, Change: put, Schema: s, Options: WriteOptions{TTL: time.Minute}}})
					if errs[0] != nil {
						bm.Error(errs[0])
						return
					}
				}
			})
		})
	}
}

// evalshaUsec is Redis's total time in EVALSHA so far (INFO commandstats).
func evalshaUsec(tb testing.TB, b *Buffer) int64 {
	info, err := b.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "cmdstat_evalsha:"); ok {
			for _, f := range strings.Split(v, ",") {
				if u, ok := strings.CutPrefix(f, "usec="); ok {
					n, _ := strconv.ParseInt(u, 10, 64)
					return n
				}
			}
		}
	}
	return 0
}
