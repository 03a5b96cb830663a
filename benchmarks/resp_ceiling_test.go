package benchmarks

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"
)

// Two reference points for the front door's HSET, which put the target
// "≥ 30 % of raw Redis HSET" in proportion. Each is a Redis-protocol
// server in this process that answers the benchmark's pipelined HSETs by
// sending each pipeline it reads to Redis in one round trip, with none of
// the front door's work (no parsing into documents, no metrics, no
// appliers, no sequence numbers, no pending index, no I leases):
//
//	proxy     forwards every HSET as it is: the ceiling of any front door
//	          that puts a process between the client and Redis
//	skeleton  runs, per HSET, the two commands no buffered write can do
//	          without — append the change to the document's list, update
//	          the cache entry (whose reply is HSET's) — in one script call
//	          per pipeline, as the front door's write script does: the
//	          ceiling of a write-back front door on Redis scripts, before
//	          any of its guarantees (sequence numbers, the pending index, I
//	          leases, counters) and without appliers
//
// They are benchmarks' reference points only: nothing here is durable or
// ordered, and the skeleton's lists are deleted when the benchmark ends.

// skeletonScript: KEYS per write the entry (hash) and its list; ARGV per
// write the field and the value. Returns HSET's reply per write.
var skeletonScript = redis.NewScript(`
local out = {}
for i = 1, #KEYS, 2 do
  local f, v = ARGV[i], ARGV[i + 1]
  redis.call('RPUSH', KEYS[i + 1], f .. '=' .. v)
  out[#out + 1] = redis.call('HSET', KEYS[i], f, v)
end
return out
`)

// skeletonList prefixes the skeleton's lists.
const skeletonList = "bw-"

// refProxy is one reference server.
type refProxy struct {
	ln    net.Listener
	rdb   *redis.Client
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]bool
}

// startRefProxy serves on a free loopback port, sending each pipeline's
// HSETs to Redis at redisAddr as forward does.
func startRefProxy(redisAddr string, forward func(ctx context.Context, rdb *redis.Client, cmds []redcon.Command) ([]int64, error)) (*refProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &refProxy{ln: ln, rdb: redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 64}), conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns[c] = true
			p.mu.Unlock()
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.serve(c, forward)
			}()
		}
	}()
	return p, nil
}

func (p *refProxy) addr() string { return p.ln.Addr().String() }

// serve answers one connection: a pipeline's HSETs are forwarded together;
// anything else (go-redis's HELLO and CLIENT SETINFO, which it tolerates
// being refused) gets an error.
func (p *refProxy) serve(c net.Conn, forward func(ctx context.Context, rdb *redis.Client, cmds []redcon.Command) ([]int64, error)) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.Close()
	}()
	ctx := context.Background()
	rd := redcon.NewReader(c)
	w := bufio.NewWriter(c)
	var out []byte
	for {
		cmds, err := rd.ReadCommands()
		if err != nil {
			return
		}
		out = out[:0]
		hsets := cmds[:0:0]
		for _, cmd := range cmds {
			if len(cmd.Args) == 4 && strings.EqualFold(string(cmd.Args[0]), "hset") {
				hsets = append(hsets, cmd)
			}
		}
		if len(hsets) != len(cmds) {
			// Not a pipeline of HSETs only: refuse it whole.
			for range cmds {
				out = redcon.AppendError(out, "ERR unknown command")
			}
		} else if replies, err := forward(ctx, p.rdb, cmds); err != nil {
			for range cmds {
				out = redcon.AppendError(out, "ERR "+err.Error())
			}
		} else {
			for _, n := range replies {
				out = redcon.AppendInt(out, n)
			}
		}
		if _, err := w.Write(out); err != nil {
			return
		}
		if err := w.Flush(); err != nil {
			return
		}
	}
}

// close stops serving and deletes the keys matching prefix* (none if
// prefix is empty).
func (p *refProxy) close(prefix string) error {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	var err error
	if prefix != "" {
		err = deleteKeys(context.Background(), p.rdb, prefix)
	}
	return errors.Join(err, p.rdb.Close())
}

// deleteKeys unlinks every key matching prefix*.
func deleteKeys(ctx context.Context, rdb *redis.Client, prefix string) error {
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

// forwardHSET sends the HSETs as they are, in one pipeline.
func forwardHSET(ctx context.Context, rdb *redis.Client, cmds []redcon.Command) ([]int64, error) {
	res, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, cmd := range cmds {
			p.HSet(ctx, string(cmd.Args[1]), string(cmd.Args[2]), string(cmd.Args[3]))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(res))
	for i, r := range res {
		out[i] = r.(*redis.IntCmd).Val()
	}
	return out, nil
}

// skeletonHSET runs the skeleton script once for the pipeline; each
// document's list is "bw-" and its key.
func skeletonHSET(ctx context.Context, rdb *redis.Client, cmds []redcon.Command) ([]int64, error) {
	keys := make([]string, 0, 2*len(cmds))
	args := make([]any, 0, 2*len(cmds))
	for _, cmd := range cmds {
		k := string(cmd.Args[1])
		keys = append(keys, k, skeletonList+k)
		args = append(args, string(cmd.Args[2]), string(cmd.Args[3]))
	}
	return skeletonScript.Run(ctx, rdb, keys, args...).Int64Slice()
}
