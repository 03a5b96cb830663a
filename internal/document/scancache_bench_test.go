package document_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/document"
)

// BenchmarkScan compares repeated scans of 5 documents (YCSB S's shape:
// 100 start keys over 1000 documents) with the scan cache on and off.
func BenchmarkScan(b *testing.B) {
	w := newScanWorld(b)
	ctx := context.Background()
	for i := range 1000 {
		id := fmt.Sprint(i)
		w.apply(b, w.a, id, w.put(b, w.a, id, "v"))
	}
	coll, _ := w.a.svc.Collection(w.coll)
	coll.Near = &document.NearCache{MaxBytes: 64 << 20, LeaseTTL: 2 * time.Second, HotWindow: 2 * time.Second}
	if err := w.a.svc.StartNear(ctx, "bench-a"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.a.svc.StopNear)
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("cache=%v", on), func(b *testing.B) {
			coll.ScanCache = on
			i := 0
			for b.Loop() {
				i++
				if _, err := w.a.svc.Scan(ctx, w.coll, fmt.Sprint(i%100*10), 5); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
