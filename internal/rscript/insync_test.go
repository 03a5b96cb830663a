package rscript

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/testenv"
)

func TestInSyncReplicas(t *testing.T) {
	info := "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n" +
		"slave0:ip=127.0.0.1,port=6391,state=online,offset=555,lag=0\r\n" +
		"slave1:ip=127.0.0.1,port=6392,state=online,offset=555,lag=1\r\n" +
		"slave2:ip=127.0.0.1,port=6393,state=online,offset=400,lag=5\r\n" +
		"slave3:ip=127.0.0.1,port=6394,state=wait_bgsave,offset=0,lag=0\r\n" +
		"slave_read_repl_offset:1\r\nmaster_repl_offset:688\r\n"
	if n := inSyncReplicas(info); n != 2 {
		t.Errorf("inSyncReplicas = %d, want 2 (online with lag ≤ 1 s)", n)
	}
}

// With fewer replicas in sync than required a write is refused before it
// runs: nothing changes in Redis, and the refusal is counted. Unknown (no
// refresh yet) and enough in sync run it.
func TestDurableShortfall(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	key := testenv.UniqueName(t, "insync")
	t.Cleanup(func() { rdb.Del(ctx, key) })
	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	s := NewInSync()
	var refused int
	s.OnRefuse = func() { refused++ }
	d := Durable{Client: rdb, Replicas: 1, Timeout: 50 * time.Millisecond, InSync: s}

	s.n.Store(0)
	_, _, err := d.Run(ctx, Call{Script: incr, Keys: []string{key}})
	var sf *ShortfallError
	if !errors.As(err, &sf) || sf.InSync != 0 || sf.Want != 1 {
		t.Fatalf("with 0 of 1 in sync: %v, want a ShortfallError", err)
	}
	if n, _ := rdb.Exists(ctx, key).Result(); n != 0 || refused != 1 {
		t.Fatalf("a refused write ran (key exists: %d) or was not counted (%d)", n, refused)
	}

	// Unknown: the write runs and WAIT (no replica here) reports it.
	s.n.Store(-1)
	reply, repl, err := d.Run(ctx, Call{Script: incr, Keys: []string{key}})
	var re *ReplicationError
	if err != nil || reply.(int64) != 1 || !errors.As(repl, &re) {
		t.Fatalf("unknown in-sync count: reply %v, repl %v, err %v; want the write run and WAIT's shortfall", reply, repl, err)
	}
}
