package bg

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/writeback/writeback/benchmarks/bench"
)

const (
	pgDSN     = "postgres://postgres@127.0.0.1:5432/writeback?sslmode=disable"
	redisAddr = "127.0.0.1:6379"
)

// staleConn is a cache that is never told about writes: it serves the
// first lists it read of a member forever.
type staleConn struct {
	Conn
	mu    sync.Mutex // guards seen
	seen  map[int32][2]int
	lists map[[2]int32]struct {
		count int
		shown []int32
	}
}

func (c *staleConn) Profile(ctx context.Context, m int32) (int, int, error) {
	c.mu.Lock()
	v, ok := c.seen[m]
	c.mu.Unlock()
	if ok {
		return v[0], v[1], nil
	}
	f, p, err := c.Conn.Profile(ctx, m)
	c.mu.Lock()
	c.seen[m] = [2]int{f, p}
	c.mu.Unlock()
	return f, p, err
}

func (c *staleConn) List(ctx context.Context, m int32, l List, n int) (int, []int32, error) {
	k := [2]int32{m, int32(l)}
	c.mu.Lock()
	v, ok := c.lists[k]
	c.mu.Unlock()
	if ok {
		return v.count, v.shown, nil
	}
	count, shown, err := c.Conn.List(ctx, m, l, n)
	c.mu.Lock()
	c.lists[k] = struct {
		count int
		shown []int32
	}{count, shown}
	c.mu.Unlock()
	return count, shown, err
}

// lossyConn acknowledges every third update without making it.
type lossyConn struct {
	Conn
	n atomic.Int64
}

func (c *lossyConn) Update(ctx context.Context, u Update) error {
	if c.n.Add(1)%3 == 0 {
		return nil
	}
	return c.Conn.Update(ctx, u)
}

// TestRunCatchesAnomalies is the mutation check of the whole pipeline: the
// same Run that validates the policies, on PostgreSQL, through a Conn that
// serves stale reads and one that loses writes. The first must be caught
// by the read validation, the second by it and by the final check; the
// honest Conn passes both. It needs `make services`.
func TestRunCatchesAnomalies(t *testing.T) {
	ctx := context.Background()
	// A table of its own: go test runs the command's smoke test, which
	// uses bg_members, at the same time.
	st, err := OpenPostgres(ctx, pgDSN, "bg_members_mutation")
	require.NoError(t, err)
	defer st.Close()
	defer func() { _, _ = st.pool.Exec(context.Background(), "DROP TABLE IF EXISTS bg_members_mutation") }()
	mix, err := ParseMixes("90")
	require.NoError(t, err)
	cfg := Config{
		Policy: bench.Database, Graph: Graph{Members: 60, Friends: 4, Pending: 4}, Mixes: mix,
		Threads: []int{4}, Step: 600 * time.Millisecond, SLALatency: 100 * time.Millisecond, SLAPct: 95,
		Seed: 7, RedisAddr: redisAddr, Samples: 3,
	}
	for _, tc := range []struct {
		name        string
		wrap        func(Conn) Conn
		stale, lost bool
	}{
		{"honest", nil, false, false},
		{"stale reads", func(c Conn) Conn {
			return &staleConn{Conn: c, seen: map[int32][2]int{}, lists: map[[2]int32]struct {
				count int
				shown []int32
			}{}}
		}, true, false},
		{"lost writes", func(c Conn) Conn { return &lossyConn{Conn: c} }, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.WrapConn = tc.wrap
			res, err := Run(ctx, st, c)
			require.NoError(t, err)
			require.Greater(t, res.Validation.Reads, 200, "too few reads to mean anything")
			require.Greater(t, res.Changes, 20)
			require.Len(t, res.Mixes, 1)
			require.Equal(t, res.Validation.Reads, res.Mixes[0].Validation.Reads)
			if tc.stale {
				require.Positive(t, res.Validation.Stale)
				require.NotEmpty(t, res.Validation.Samples)
				t.Logf("%d of %d reads stale, e.g. %s", res.Validation.Stale, res.Validation.Reads, res.Validation.Samples[0])
			} else {
				require.Zero(t, res.Validation.Stale, "%v", res.Validation.Samples)
			}
			if tc.lost {
				require.Positive(t, res.FinalBad)
				t.Logf("%d lists wrong, e.g. %s", res.FinalBad, res.FinalDiffs[0])
			} else {
				require.Zero(t, res.FinalBad, "%v", res.FinalDiffs)
			}
			require.Equal(t, tc.stale || tc.lost, res.Failed())
		})
	}
}
