package server

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/internal/testenv"
)

// A command whose reply comes after the read deadline (a sidecar paused
// past it, a slow network) already ran in Redis: the client must not send
// it again. Through a proxy that delays the first connection's replies
// beyond go-redis's 3 s read timeout, an INCR fails and the counter is 1,
// not 2 (go-redis's own retry would resend it; TestSidecarPausedPastOwnerLease
// once saw increments applied twice that way).
func TestLateReplyIsNotResent(t *testing.T) {
	upstream := testenv.RedisAddr(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			late := conns.Add(1) == 1
			var armed atomic.Bool // the INCR went through: hold its reply
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if late && bytes.Contains(bytes.ToLower(buf[:n]), []byte("incr")) {
							armed.Store(true)
						}
						if _, werr := u.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				u.Close()
			}()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := u.Read(buf)
					if n > 0 {
						if armed.Load() {
							time.Sleep(3500 * time.Millisecond)
						}
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				c.Close()
			}()
		}
	}()
	rdb, err := newRedis(config.Redis{Mode: config.ModeStandalone, Addrs: []string{ln.Addr().String()}, PoolSize: 1, DialTimeout: config.Duration{Duration: 10 * time.Second}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	key := testenv.UniqueName(t, "lateincr")
	ctx := context.Background()
	direct, err := newRedis(config.Redis{Mode: config.ModeStandalone, Addrs: []string{upstream}, PoolSize: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	defer direct.Del(ctx, key)
	_ = rdb.Incr(ctx, key).Err() // late: an error, or (with retries) a second INCR
	time.Sleep(4 * time.Second)  // the late reply, and any resend, have landed
	if n, err := direct.Get(ctx, key).Int(); err != nil || n != 1 {
		t.Fatalf("the counter is %d (%v) after one INCR whose reply came late; want 1: the client resent it", n, err)
	}
}
