package pipeshare

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/testenv"
)

// counts are a Hook's counters: calls sent in shared rounds, and rounds.
type counts struct{ calls, rounds prometheus.Counter }

func (c counts) read() (calls, rounds int64) {
	return int64(testutil.ToFloat64(c.calls)), int64(testutil.ToFloat64(c.rounds))
}

// shared returns a client whose round trips are shared, its counters, and
// a name prefix for the test's keys, deleted at the end.
func shared(t *testing.T) (*redis.Client, counts, string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), MaxRetries: -1})
	h := counts{prometheus.NewCounter(prometheus.CounterOpts{Name: "calls"}), prometheus.NewCounter(prometheus.CounterOpts{Name: "rounds"})}
	Share(c, h.calls, h.rounds)
	prefix := testenv.UniqueName(t, "pipeshare")
	t.Cleanup(func() {
		ctx := context.Background()
		if keys, _ := c.Keys(ctx, prefix+":*").Result(); len(keys) > 0 {
			c.Del(ctx, keys...)
		}
		_ = c.Close()
	})
	return c, h, prefix
}

// Concurrent callers each read back only their own replies, in their own
// order, whatever they share a round with: pipelines and single commands,
// replies of every type, Redis errors and nil replies each reach the
// command that caused them.
func TestCallersGetTheirOwnReplies(t *testing.T) {
	c, h, prefix := shared(t)
	ctx := context.Background()
	const callers, rounds = 32, 200
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("%s:%d", prefix, g)
			for i := 1; i <= rounds; i++ {
				pipe := c.Pipeline()
				set := pipe.Set(ctx, key, strconv.Itoa(g*1000000+i), 0)
				get := pipe.Get(ctx, key)
				bad := pipe.HGet(ctx, key, "f") // WRONGTYPE: key holds a string
				none := pipe.Get(ctx, key+":none")
				_, err := pipe.Exec(ctx)
				switch {
				case set.Err() != nil || get.Err() != nil:
					errs <- fmt.Errorf("caller %d: set %v, get %v", g, set.Err(), get.Err())
					return
				case get.Val() != strconv.Itoa(g*1000000+i):
					errs <- fmt.Errorf("caller %d round %d read %s", g, i, get.Val())
					return
				case bad.Err() == nil || err == nil || err.Error() != bad.Err().Error():
					errs <- fmt.Errorf("caller %d: the failing command's error %v is not Exec's %v", g, bad.Err(), err)
					return
				case !errors.Is(none.Err(), redis.Nil):
					errs <- fmt.Errorf("caller %d: a missing key read %v, not redis.Nil", g, none.Err())
					return
				}
				n, err := c.Incr(ctx, key+":n").Result()
				if err != nil || n != int64(i) {
					errs <- fmt.Errorf("caller %d: INCR answered %d, %v; want %d", g, n, err, i)
					return
				}
				if err := c.Get(ctx, key+":none").Err(); !errors.Is(err, redis.Nil) {
					errs <- fmt.Errorf("caller %d: a single missing key read %v, not redis.Nil", g, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	calls, sent := h.read()
	if calls != callers*rounds*3 {
		t.Errorf("%d calls went in shared rounds, want every one of %d", calls, callers*rounds*3)
	}
	if sent >= calls {
		t.Errorf("%d calls took %d rounds: none was shared", calls, sent)
	}
	t.Logf("%d calls in %d rounds", calls, sent)
}

// A transaction, WAIT, a blocking command and a pipeline longer than a
// round go alone: a blocked BLPOP holds no other caller's round.
func TestWhatCannotShareGoesAlone(t *testing.T) {
	c, h, prefix := shared(t)
	ctx := context.Background()

	start, _ := h.read()
	var blocked atomic.Bool
	blocked.Store(true)
	popped := make(chan error, 1)
	go func() {
		err := c.BLPop(ctx, 2*time.Second, prefix+":list").Err()
		blocked.Store(false)
		popped <- err
	}()
	time.Sleep(100 * time.Millisecond) // let BLPOP reach Redis
	for i := 0; i < 50; i++ {
		if err := c.Set(ctx, prefix+":k", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if !blocked.Load() {
		t.Fatal("BLPOP ended before the other callers' commands: they waited for it")
	}
	if err := <-popped; !errors.Is(err, redis.Nil) {
		t.Fatalf("BLPOP on an empty list answered %v, want a timeout (redis.Nil)", err)
	}
	if n, _ := h.read(); n-start != 50 {
		t.Errorf("%d calls went in shared rounds, want the 50 SETs alone (not BLPOP)", n-start)
	}

	before, _ := h.read()
	cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, prefix+":tx")
		p.Incr(ctx, prefix+":tx")
		return nil
	})
	if err != nil || cmds[1].(*redis.IntCmd).Val() != 2 {
		t.Fatalf("a transaction answered %v, %v", cmds, err)
	}
	if n, err := c.Do(ctx, "WAIT", 0, 10).Int(); err != nil || n < 0 {
		t.Fatalf("WAIT answered %d, %v", n, err)
	}
	pipe := c.Pipeline()
	for i := 0; i <= maxCommands; i++ {
		pipe.Incr(ctx, prefix+":long")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if after, _ := h.read(); after != before {
		t.Errorf("%d of a transaction, a WAIT and a long pipeline went in shared rounds", after-before)
	}
	if n, _ := c.Get(ctx, prefix+":long").Int(); n != maxCommands+1 {
		t.Errorf("the long pipeline counted %d, want %d", n, maxCommands+1)
	}
}

// A caller whose context is done sends nothing, and leaves nothing for
// the next caller.
func TestCancelledCallerSendsNothing(t *testing.T) {
	c, _, prefix := shared(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Set(ctx, prefix+":c", "v", 0).Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled caller's SET answered %v", err)
	}
	pipe := c.Pipeline()
	pipe.Set(ctx, prefix+":c", "v", 0)
	if _, err := pipe.Exec(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled caller's pipeline answered %v", err)
	}
	if err := c.Get(context.Background(), prefix+":c").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("the next caller read %v: a cancelled caller's SET ran", err)
	}
}

func TestShareable(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		cmd  redis.Cmder
		want bool
	}{
		{redis.NewStringCmd(ctx, "get", "k"), true},
		{redis.NewCmd(ctx, "EVALSHA", "abc", 0), true},
		{redis.NewCmd(ctx, "WAIT", 1, 100), false},
		{redis.NewStringSliceCmd(ctx, "blpop", "k", 1), false},
		{redis.NewStatusCmd(ctx, "multi"), false},
		{redis.NewCmd(ctx, "CLIENT", "SETNAME", "x"), false},
	} {
		if got := shareable(c.cmd); got != c.want {
			t.Errorf("shareable(%v) = %v, want %v", c.cmd.Args(), got, c.want)
		}
	}
}

// Without a connection to Redis every caller gets the error, single
// commands and pipelines alike, as without sharing.
func TestNoConnectionFailsEveryCaller(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: every dial is refused
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	h := counts{prometheus.NewCounter(prometheus.CounterOpts{Name: "calls"}), prometheus.NewCounter(prometheus.CounterOpts{Name: "rounds"})}
	Share(c, h.calls, h.rounds)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Ping(ctx).Err(); err == nil {
				t.Error("PING without Redis answered no error")
			}
			pipe := c.Pipeline()
			get := pipe.Get(ctx, "k")
			if _, err := pipe.Exec(ctx); err == nil || get.Err() == nil || errors.Is(get.Err(), redis.Nil) {
				t.Errorf("a pipeline without Redis answered %v (its GET %v)", err, get.Err())
			}
		}()
	}
	wg.Wait()
	if calls, _ := h.read(); calls == 0 {
		t.Error("no call went in a shared round")
	}
}

// A connection's own commands (OnConnect's, on the redis.Conn being set
// up) run on that connection, not in a shared round — which, with every
// connection of the pool taken by the one being set up, could never run.
func TestConnectionsOwnCommandsGoAlone(t *testing.T) {
	var infos atomic.Int32
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), MaxRetries: -1, PoolSize: 1, PoolTimeout: 2 * time.Second,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			if err := cn.Info(ctx, "server").Err(); err != nil {
				return err
			}
			infos.Add(1)
			return nil
		}})
	defer c.Close()
	h := counts{prometheus.NewCounter(prometheus.CounterOpts{Name: "calls"}), prometheus.NewCounter(prometheus.CounterOpts{Name: "rounds"})}
	Share(c, h.calls, h.rounds)
	// WAIT goes alone: the connection it dials is set up outside any round.
	if err := c.Do(context.Background(), "WAIT", 0, 0).Err(); err != nil {
		t.Fatalf("WAIT through the pool's one connection answered %v", err)
	}
	if infos.Load() != 1 {
		t.Errorf("OnConnect ran %d times", infos.Load())
	}
	if calls, _ := h.read(); calls != 0 {
		t.Errorf("%d calls went in shared rounds, want none (not OnConnect's INFO)", calls)
	}
}
