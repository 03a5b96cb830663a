package resp_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/config"
)

// The document commands over both protocols, against the semantics of
// docs/api.md: a document is a hash of its non-null columns.
func TestDocumentCommands(t *testing.T) {
	w := startWorld(t, nil)
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			c, ctx := w.client(t, proto), context.Background()
			k := w.key(100 + proto)
			check := func(what string, got, want any) {
				t.Helper()
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%s: %v; want %v", what, got, want)
				}
			}
			n, err := c.HSet(ctx, k, "s", "hello", "n", "5").Result()
			check("HSET creating", fmt.Sprint(n, err), "2 <nil>")
			n, err = c.HSet(ctx, k, "s", "bye", "b", "1", "j", `{"a": [1, 2]}`).Result()
			check("HSET adding two", fmt.Sprint(n, err), "2 <nil>")
			check("HGETALL", c.HGetAll(ctx, k).Val(), map[string]string{"s": "bye", "n": "5", "b": "1", "j": `{"a":[1,2]}`})
			check("HGET", c.HGet(ctx, k, "s").Val(), "bye")
			_, err = c.HGet(ctx, k, "f").Result()
			check("HGET null", err, redis.Nil)
			_, err = c.HGet(ctx, k, "id").Result()
			check("HGET key column", err, redis.Nil)
			check("HMGET", c.HMGet(ctx, k, "n", "f", "nope", "s").Val(), []any{"5", nil, nil, "bye"})
			check("HLEN", c.HLen(ctx, k).Val(), 4)
			check("HEXISTS", c.HExists(ctx, k, "n").Val(), true)
			check("HEXISTS null", c.HExists(ctx, k, "f").Val(), false)
			check("HINCRBY", fmt.Sprint(c.HIncrBy(ctx, k, "n", 10).Result()), "15 <nil>")
			check("HINCRBYFLOAT creating", fmt.Sprint(c.HIncrByFloat(ctx, k, "f", 1.5).Result()), "1.5 <nil>")
			check("HINCRBYFLOAT", fmt.Sprint(c.HIncrByFloat(ctx, k, "f", 0.25).Result()), "1.75 <nil>")
			check("HDEL", fmt.Sprint(c.HDel(ctx, k, "j", "nope", "f").Result()), "2 <nil>")
			check("HDEL again", fmt.Sprint(c.HDel(ctx, k, "j").Result()), "0 <nil>")
			check("HGETALL after", c.HGetAll(ctx, k).Val(), map[string]string{"s": "bye", "n": "15", "b": "1"})
			check("EXISTS", c.Exists(ctx, k, k, w.key(999)).Val(), 2)
			check("HMSET", c.HMSet(ctx, k, "s", "x").Val(), true)
			check("DEL", c.Del(ctx, k, w.key(999)).Val(), 1)
			check("EXISTS after DEL", c.Exists(ctx, k).Val(), 0)
			check("HGETALL of a missing document", c.HGetAll(ctx, k).Val(), map[string]string{})
			check("HLEN of a missing document", c.HLen(ctx, k).Val(), 0)
			check("HDEL of a missing document", c.HDel(ctx, k, "s").Val(), 0)
			check("HINCRBY creating", c.HIncrBy(ctx, w.table+":"+strconv.Itoa(200+proto), "n", -3).Val(), -3)
			check("colon key", c.HGet(ctx, w.table+"/"+strconv.Itoa(200+proto), "n").Val(), "-3")

			errs := []struct {
				args []any
				want string
			}{
				{[]any{"hset", k, "n", "x"}, `ERR value for field "n" is not an integer or out of range`},
				{[]any{"hset", k, "nope", "x"}, "ERR unknown field 'nope'"},
				{[]any{"hset", k, "id", "1"}, "ERR field 'id' is the document's key"},
				{[]any{"hset", k, "s"}, "ERR wrong number of arguments for 'hset' command"},
				{[]any{"hset", k, "s", "a", "n"}, "ERR wrong number of arguments for 'hset' command"},
				{[]any{"hincrby", k, "n", "1.5"}, "ERR value is not an integer or out of range"},
				{[]any{"hincrby", k, "s", "1"}, "ERR hash value is not an integer"},
				{[]any{"hincrbyfloat", k, "s", "1"}, "ERR hash value is not a float"},
				{[]any{"hincrbyfloat", k, "n", "0.5"}, "ERR field 'n' is an integer column"},
				{[]any{"hincrbyfloat", k, "f", "abc"}, "ERR value is not a valid float"},
				{[]any{"hset", w.table + "_nn/1", "s", "x"}, `ERR field "req" is required: the column is NOT NULL`},
				{[]any{"hdel", w.table + "_nn/1", "req"}, "ERR field 'req' cannot be deleted: the column is NOT NULL"},
				{[]any{"hget", "nope/1", "s"}, "ERR unknown collection 'nope'"},
				{[]any{"hget", "nokey", "s"}, "ERR key 'nokey' does not name a document"},
				{[]any{"hget", w.table + "/abc", "s"}, `ERR invalid id "abc"`},
				{[]any{"get", "a"}, "ERR unknown command 'get', with args beginning with: 'a' "},
				{[]any{"select", "1"}, "ERR DB index is out of range"},
			}
			for _, e := range errs {
				err := c.Do(ctx, e.args...).Err()
				if err == nil || !strings.HasPrefix(err.Error(), e.want) {
					t.Errorf("%v: %v; want %q", e.args, err, e.want)
				}
			}
			check("SELECT 0", c.Do(ctx, "select", "0").Val(), "OK")
			check("PING", c.Ping(ctx).Val(), "PONG")
			check("ECHO", c.Echo(ctx, "hi").Val(), "hi")
		})
	}
	// A refused write leaves nothing buffered.
	if n := metric(t, w.reg, "writeback_buffered_changes_total", nil); n == 0 {
		t.Fatal("nothing was buffered at all")
	}
	before := metric(t, w.reg, "writeback_buffered_changes_total", nil)
	c, ctx := w.client(t, 3), context.Background()
	for _, args := range [][]any{{"hset", w.key(300), "n", "x"}, {"hset", w.table + "_nn/1", "s", "x"}, {"hincrby", w.key(300), "s", "1"}} {
		_ = c.Do(ctx, args...).Err()
	}
	if after := metric(t, w.reg, "writeback_buffered_changes_total", nil); after != before {
		t.Errorf("refused writes buffered %v changes", after-before)
	}
	if c.Exists(ctx, w.key(300)).Val() != 0 {
		t.Error("a refused HSET created the document")
	}
}

// HINCRBY near the limits of int64 refuses what Redis refuses, and buffers
// nothing then.
func TestIncrementOverflow(t *testing.T) {
	w := startWorld(t, nil)
	c, ctx := w.client(t, 3), context.Background()
	k := w.key(1)
	if err := c.HSet(ctx, k, "n", strconv.FormatInt(1<<62, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if v := c.HIncrBy(ctx, k, "n", 1<<62-1).Val(); v != 1<<63-1 {
		t.Fatalf("HINCRBY to MaxInt64: %d", v)
	}
	if err := c.HIncrBy(ctx, k, "n", 1).Err(); err == nil || err.Error() != "ERR increment or decrement would overflow" {
		t.Fatalf("overflow: %v", err)
	}
	if v := c.HGet(ctx, k, "n").Val(); v != "9223372036854775807" {
		t.Fatalf("after a refused overflow n = %s", v)
	}
	if err := c.HSet(ctx, k, "f", "1e308").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HIncrByFloat(ctx, k, "f", 1e308).Err(); err == nil || err.Error() != "ERR increment would produce NaN or Infinity" {
		t.Fatalf("float overflow: %v", err)
	}
}

// Pipelined commands are answered in order, and each sees the writes to
// its document before it in the pipeline.
func TestPipelineOrder(t *testing.T) {
	w := startWorld(t, nil)
	for _, proto := range []int{2, 3} {
		c, ctx := w.client(t, proto), context.Background()
		pipe := c.Pipeline()
		const docs, rounds = 5, 40
		type check struct {
			cmd  redis.Cmder
			want string
		}
		var checks []check
		for d := range docs {
			k := w.key(1000*proto + d)
			checks = append(checks, check{pipe.HSet(ctx, k, "s", "v0", "n", "0"), "2"})
		}
		for r := 1; r <= rounds; r++ {
			for d := range docs {
				k := w.key(1000*proto + d)
				v := fmt.Sprintf("v%d", r)
				checks = append(checks,
					check{pipe.HGet(ctx, k, "s"), fmt.Sprintf("v%d", r-1)},
					check{pipe.HSet(ctx, k, "s", v), "0"},
					check{pipe.HIncrBy(ctx, k, "n", 1), strconv.Itoa(r)},
					check{pipe.HGet(ctx, k, "s"), v},
					check{pipe.Exists(ctx, k, w.key(1000*proto+(d+1)%docs)), "2"},
				)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for i, ch := range checks {
			var got string
			switch cmd := ch.cmd.(type) {
			case *redis.IntCmd:
				got = strconv.FormatInt(cmd.Val(), 10)
			case *redis.StringCmd:
				got = cmd.Val()
			}
			if got != ch.want {
				t.Fatalf("RESP%d: reply %d (%v) = %q; want %q", proto, i, ch.cmd.Args(), got, ch.want)
			}
		}
	}
}

// Bad input at the protocol level gets Redis's error and the connection
// closed, or is ignored where Redis ignores it; never a crash.
func TestProtocolErrors(t *testing.T) {
	w := startWorld(t, func(c *config.Config) { c.Limits.MaxBodyBytes = 64 << 10 })
	tests := []struct{ name, in, reply string }{
		{"not a bulk", "*1\r\nPING\r\n", "-ERR Protocol error: expected '$', got 'P'\r\n"},
		{"negative bulk", "*1\r\n$-1\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"huge bulk", "*1\r\n$9223372036854775807\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"garbage count", "*x\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"huge count", "*3000000000\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"unbalanced quotes", "PING \"a\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"too large", "*3\r\n$4\r\nECHO\r\n$70000\r\n", "-ERR Protocol error: command too large: its arguments exceed limits.maxBodyBytes (65536 bytes)\r\n"},
		{"after a good command", "*1\r\n$4\r\nPING\r\n*1\r\n$x\r\n", "+PONG\r\n-ERR Protocol error: invalid bulk length\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := w.raw(t)
			c.send(tc.in)
			c.expect(tc.reply)
			c.expectClosed()
		})
	}
	t.Run("ignored and inline", func(t *testing.T) {
		c := w.raw(t)
		c.send("*0\r\n*-1\r\n\r\nPING\r\nECHO  'a b'\r\n*1\r\n$4\r\nPING\r\n")
		c.expect("+PONG\r\n$3\r\na b\r\n+PONG\r\n")
		c.send("QUIT\r\n")
		c.expect("+OK\r\n")
		c.expectClosed()
	})
	t.Run("unknown command with binary arguments", func(t *testing.T) {
		c := w.raw(t)
		c.send("*3\r\n$3\r\nF\x00O\r\n$3\r\na\r\n\r\n$0\r\n\r\n")
		c.expect("-ERR unknown command 'F\x00O', with args beginning with: 'a  ' '' \r\n")
		c.send("PING\r\n")
		c.expect("+PONG\r\n")
	})
}

// Connections leave no goroutine behind, whatever they sent and however
// they ended.
func TestGoroutinesSettle(t *testing.T) {
	w := startWorld(t, nil)
	c := w.client(t, 3)
	ctx := context.Background()
	if err := c.HSet(ctx, w.key(1), "s", "x").Err(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	time.Sleep(50 * time.Millisecond)
	base, _ := frontDoorGoroutines()
	if base == 0 {
		t.Fatal("no goroutine of the front door found (its listener runs one): frontDoorGoroutines counts nothing")
	}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", w.addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer nc.Close()
			var b strings.Builder
			for j := range 50 {
				fmt.Fprintf(&b, "*4\r\n$4\r\nHSET\r\n$%d\r\n%s\r\n$1\r\nn\r\n$1\r\n%d\r\n", len(w.key(j%7)), w.key(j%7), j%10)
				fmt.Fprintf(&b, "*2\r\n$7\r\nHGETALL\r\n$%d\r\n%s\r\n", len(w.key(j%5)), w.key(j%5))
			}
			switch i % 4 {
			case 0: // bad input: closed by the server
				b.WriteString("*1\r\n$x\r\n")
			case 1: // half a command: closed by the client
				b.WriteString("*2\r\n$4\r\nECHO\r\n$10\r\nabc")
			case 2:
				b.WriteString("QUIT\r\n")
			}
			_, _ = nc.Write([]byte(b.String()))
			if i%2 == 0 {
				buf := make([]byte, 4096)
				_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
				for {
					if _, err := nc.Read(buf); err != nil {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	settle(t, base, 10*time.Second)
}

// With a token, only AUTH, HELLO … AUTH and QUIT are served before
// authenticating.
func TestAuth(t *testing.T) {
	w := startWorld(t, func(c *config.Config) { c.Auth.Token = "s3cret" })
	ctx := context.Background()
	raw := w.raw(t)
	raw.send("PING\r\nHELLO 3\r\nAUTH wrong\r\nAUTH bob s3cret\r\nAUTH s3cret\r\nPING\r\n")
	raw.expect("-NOAUTH Authentication required.\r\n" +
		"-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n" +
		"-WRONGPASS invalid username-password pair or user is disabled.\r\n" +
		"-WRONGPASS invalid username-password pair or user is disabled.\r\n" +
		"+OK\r\n+PONG\r\n")
	for _, proto := range []int{2, 3} {
		c := redis.NewClient(&redis.Options{Addr: w.addr, Protocol: proto, Password: "s3cret"})
		if err := c.HSet(ctx, w.key(1), "s", "x").Err(); err != nil {
			t.Fatalf("RESP%d with the token: %v", proto, err)
		}
		c.Close()
		c = redis.NewClient(&redis.Options{Addr: w.addr, Protocol: proto, Password: "nope", MaxRetries: -1})
		if err := c.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
			t.Fatalf("RESP%d with a wrong token: %v", proto, err)
		}
		c.Close()
	}
	if n := metric(t, w.reg, "writeback_requests_total", map[string]string{"op": "connection", "code": "401"}); n < 4 {
		t.Errorf("refused authentications counted %v times; want at least 4", n)
	}
}

// HELLO, CLIENT, COMMAND and INFO answer what clients expect of them.
func TestConnectionCommands(t *testing.T) {
	w := startWorld(t, nil)
	ctx := context.Background()
	c := w.client(t, 3)
	hello, err := c.Do(ctx, "hello", "3", "setname", "me").Result()
	if err != nil {
		t.Fatal(err)
	}
	h, _ := hello.(map[any]any)
	if h["proto"] != int64(3) || h["server"] != "redis" || h["mode"] != "standalone" {
		t.Fatalf("HELLO 3: %v", hello)
	}
	if name := c.Do(ctx, "client", "getname").Val(); name != "me" {
		t.Fatalf("CLIENT GETNAME: %v", name)
	}
	if err := c.Do(ctx, "client", "setinfo", "lib-name", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if n := c.Do(ctx, "command", "count").Val(); n != int64(22) {
		t.Errorf("COMMAND COUNT: %v", n)
	}
	docs, err := c.Do(ctx, "command", "docs", "hset").Result()
	if m, _ := docs.(map[any]any); err != nil || m["hset"] == nil {
		t.Errorf("COMMAND DOCS hset: %v %v", docs, err)
	}
	info, err := c.Info(ctx, "writeback").Result()
	if err != nil || !strings.Contains(info, "pending_changes:") || !strings.Contains(info, "collection_"+w.table+":store=pg") {
		t.Errorf("INFO writeback: %q %v", info, err)
	}
	if info := c.Info(ctx).Val(); !strings.Contains(info, "redis_version:") || !strings.Contains(info, "# Writeback") {
		t.Errorf("INFO: %q", info)
	}
	if err := c.Do(ctx, "client", "nope").Err(); err == nil || err.Error() != "ERR unknown subcommand 'nope'. Try CLIENT HELP." {
		t.Errorf("CLIENT nope: %v", err)
	}
	if err := c.Do(ctx, "hello", "4").Err(); err == nil || err.Error() != "NOPROTO unsupported protocol version" {
		t.Errorf("HELLO 4: %v", err)
	}
}

// A graceful shutdown answers the commands already read, then closes the
// connections.
func TestShutdown(t *testing.T) {
	w := startWorld(t, nil)
	c := w.raw(t)
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, "HINCRBY %s n 1\r\n", w.key(i%3))
	}
	c.send(b.String()) // one read: the server has them all once it answers the first
	c.expect(":1\r\n")
	w.shutdown()
	want := map[string]int{}
	for i := 1; i < 200; i++ {
		want[fmt.Sprintf(":%d\r\n", i/3+1)]++
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := map[string]int{}
	for {
		line, err := c.rd.ReadString('\n')
		if err != nil {
			break
		}
		got[line]++
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the shutdown began, the replies were %v; want %v", got, want)
	}
}

// The synchronous policies hold for the front door too: the store has the
// write when it is acknowledged.
func TestPolicies(t *testing.T) {
	for _, policy := range []string{"write-through", "write-around"} {
		t.Run(policy, func(t *testing.T) {
			w := startWorld(t, func(c *config.Config) {
				for name, coll := range c.Collections {
					coll.Policy = policy
					c.Collections[name] = coll
				}
			})
			c, ctx := w.client(t, 3), context.Background()
			k := w.key(1)
			if n, err := c.HSet(ctx, k, "s", "a", "n", "1").Result(); err != nil || n != 2 {
				t.Fatalf("HSET: %d %v", n, err)
			}
			if n, err := c.HIncrBy(ctx, k, "n", 41).Result(); err != nil || n != 42 {
				t.Fatalf("HINCRBY: %d %v", n, err)
			}
			var s string
			var n int64
			if err := w.db.QueryRow(fmt.Sprintf("SELECT s, n FROM %s WHERE id = 1", w.table)).Scan(&s, &n); err != nil || s != "a" || n != 42 {
				t.Fatalf("the store has %q, %d (%v) right after the acknowledgement; want a, 42", s, n, err)
			}
			if got := c.HGetAll(ctx, k).Val(); got["s"] != "a" || got["n"] != "42" {
				t.Fatalf("HGETALL: %v", got)
			}
			if n, err := c.Del(ctx, k).Result(); err != nil || n != 1 {
				t.Fatalf("DEL: %d %v", n, err)
			}
			var rows int
			_ = w.db.QueryRow(fmt.Sprintf("SELECT count(*) FROM %s", w.table)).Scan(&rows)
			if rows != 0 {
				t.Fatalf("%d rows after DEL", rows)
			}
		})
	}
}

// Commands on different documents run concurrently: while a read waits for
// the store (a miss, held up by a table lock), a write to another document
// later in the same pipeline is already done; the replies still come in
// order.
func TestPipelineRunsDocumentsConcurrently(t *testing.T) {
	w := startWorld(t, nil)
	ctx := context.Background()
	other := w.client(t, 3)
	if err := other.HSet(ctx, w.key(2), "s", "old").Err(); err != nil { // cached from now on
		t.Fatal(err)
	}
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(fmt.Sprintf("LOCK TABLE %s IN ACCESS EXCLUSIVE MODE", w.table)); err != nil {
		t.Fatal(err)
	}
	c := w.raw(t)
	c.send(fmt.Sprintf("HGETALL %s\r\nHSET %s s new\r\n", w.key(1), w.key(2)))
	deadline := time.Now().Add(10 * time.Second)
	for other.HGet(ctx, w.key(2), "s").Val() != "new" {
		if time.Now().After(deadline) {
			t.Fatal("the HSET behind a blocked read did not run")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if b, err := c.rd.ReadByte(); err == nil {
		t.Fatalf("a reply (%q…) came before the blocked read's", b)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	c.expect("*0\r\n:0\r\n")
}
