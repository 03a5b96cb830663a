package ycsb

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// stuckClient answers every read at once except its first, which waits
// for its context: an operation the server never answers.
type stuckClient struct{ calls atomic.Int64 }

func (c *stuckClient) Read(ctx context.Context, key string, decode bool) (Row, error) {
	if c.calls.Add(1) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, nil
}
func (c *stuckClient) Update(context.Context, string, int, string) error { return nil }
func (c *stuckClient) Close() error                                      { return nil }

// An operation that gets no answer fails after OpTimeout, says so, and the
// client goes on with a fresh context: the run's watchdog replaces the
// per-operation timers.
func TestOperationTimeout(t *testing.T) {
	ch, err := NewChooser("uniform", 100)
	if err != nil {
		t.Fatal(err)
	}
	c := &stuckClient{}
	w := &Workload{Spec: Spec{Table: "t", Records: 100, Fields: 1, FieldSize: 1}, Clients: 1, ReadRatio: 1,
		Chooser: ch, Duration: 300 * time.Millisecond, OpTimeout: 100 * time.Millisecond, Seed: 1}
	start := time.Now()
	res, err := w.Run(context.Background(), []Client{c})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 1 || len(res.ErrorSamples) != 1 || !strings.Contains(res.ErrorSamples[0], "no answer within the operation timeout (100ms)") {
		t.Fatalf("errors %d %q; want the stuck read to time out once", res.Errors, res.ErrorSamples)
	}
	if res.Ops == 0 {
		t.Fatal("no operation after the timeout: the client kept the cancelled context")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the run took %v", d)
	}
}
