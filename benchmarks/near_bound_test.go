package benchmarks

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/sidecar"
	"github.com/writeback/writeback/benchmarks/ycsb"
)

// The bound of YCSB C through the Redis-protocol front door (issue 17's
// "C ≥ 1.5× the database"): with the near cache, a read is answered from
// the sidecar's memory, so the front door can be no faster than a bare
// Redis-protocol server that answers HGETALL with bytes it already holds
// and does nothing else (mapServer: redcon and a Go map, the reply
// encoded once). Measured side by side, in rounds, with the same
// one-at-a-time clients (go-redis, as YCSB's RESP client; pgx through
// database/sql for the database, as YCSB's database client), on this
// machine where the clients and the server share the CPUs:
//
//	postgres   the database alone: YCSB's point read
//	map        the bare server: the ceiling of any Redis-protocol front door
//	near       the front door with the near cache (default lease, 2 s)
//
// Reported: the medians of the throughputs and of the per-round ratios
// near/map (how close the front door gets to the bound), map/postgres
// (the bound on C's ratio) and near/postgres (C's ratio). b.N is ignored.
func BenchmarkNearHitBound(b *testing.B) {
	db, near, srv := boundSetup(b, false)
	mapc, nearc := respClient(srv.addr()), respClient(near.RespAddr())
	defer mapc.Close()
	defer nearc.Close()
	hgetall := func(c *redis.Client) func(ctx context.Context, r *rand.Rand, n int) error {
		return func(ctx context.Context, r *rand.Rand, n int) error {
			k := spec.Table + "/" + randomKey(r)
			if c == mapc {
				k = randomKey(r)
			}
			m, err := c.HGetAll(ctx, k).Result()
			if err != nil {
				return err
			}
			if len(m) != spec.Fields {
				return fmt.Errorf("%s: %d fields, want %d", k, len(m), spec.Fields)
			}
			return nil
		}
	}
	sqlcs := pgClients(b, db, 0)
	pg := respVariant{"postgres", func(ctx context.Context, r *rand.Rand, n int) error {
		c := <-sqlcs
		defer func() { sqlcs <- c }()
		_, err := c.Read(ctx, randomKey(r), true)
		return err
	}, true}
	vs := []respVariant{pg, {"map", hgetall(mapc), true}, {"near", hgetall(nearc), true}}
	boundRounds(b, vs, near, 0, "near/map", "map/postgres", "near/postgres")
}

// boundSetup returns what a bound benchmark compares: the loaded
// database, the front door with the near cache (default lease) and a bare
// server over the same records (closed when b ends), taking writes too
// with buffer.
func boundSetup(b *testing.B, buffer bool) (*ycsb.DB, *sidecar.Sidecar, *mapServer) {
	db := setup(b)
	near := nearSetup(b, 2*time.Second)
	srv, err := startMapServer(context.Background(), respWorld.raw, respWorld.prefix+":", buffer)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.close)
	return db, near, srv
}

// pgClients returns a pool of YCSB database clients, one per goroutine of
// measure with threads (0: the default), as YCSB has one per thread;
// closed when b ends.
func pgClients(b *testing.B, db *ycsb.DB, threads int) chan ycsb.Client {
	sqlcs := make(chan ycsb.Client, clients(threads))
	for range cap(sqlcs) {
		c, err := db.NewClient(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		sqlcs <- c
	}
	return sqlcs
}

// boundRounds measures the variants side by side, in rounds of one window
// each with threads clients (0: the default), the front door near warmed
// before its window (the other windows outlast its lease), and reports
// the medians of the throughputs and of the per-round ratios named "x/y"
// (variant x over variant y), and logs each variant's median CPU time per
// operation by process (bench.TakeCPU: this process holds the clients, the
// bare servers and the front door).
func boundRounds(b *testing.B, vs []respVariant, near *sidecar.Sidecar, threads int, ratioNames ...string) {
	const rounds, window = 5, time.Second
	ctx := context.Background()
	runs, ratios := map[string][]float64{}, map[string][]float64{}
	cpu := map[string]map[string][]float64{} // variant → process → µs per operation, per round
	b.ResetTimer()
	for range rounds {
		round := map[string]float64{}
		for _, v := range vs {
			if v.name == "near" {
				if err := warmFrontDoor(ctx, near); err != nil {
					b.Fatal(err)
				}
			}
			cpu0, start := bench.TakeCPU(), time.Now()
			round[v.name] = measure(b, v, window, threads)
			ops := round[v.name] * time.Since(start).Seconds()
			if cpu[v.name] == nil {
				cpu[v.name] = map[string][]float64{}
			}
			for p, d := range bench.TakeCPU().Sub(cpu0) {
				cpu[v.name][p] = append(cpu[v.name][p], float64(d.Microseconds())/max(ops, 1))
			}
			runs[v.name] = append(runs[v.name], round[v.name])
		}
		for _, name := range ratioNames {
			x, y, _ := strings.Cut(name, "/")
			ratios[name] = append(ratios[name], round[x]/round[y])
		}
	}
	b.StopTimer()
	reportMedians(b, runs, ratios)
	b.Logf("throughput per round: %v", runs)
	b.Logf("ratios per round: %v", ratios)
	for _, v := range vs {
		var cells []string
		for _, p := range []string{"self", "postgres", "redis-server"} {
			cells = append(cells, fmt.Sprintf("%s %.1f", p, bench.Median(cpu[v.name][p])))
		}
		b.Logf("CPU µs per operation, medians of the rounds, %s: %s", v.name, strings.Join(cells, ", "))
	}
}

// mapServer is the bound: a Redis-protocol server that answers HGETALL
// <key> with the reply bytes of a hash it copied from Redis at start, and
// refuses everything else (go-redis tolerates its HELLO being refused).
type mapServer struct {
	ln      net.Listener
	replies map[string][]byte
	wg      sync.WaitGroup
	// buffer, when set, makes the server take HSET too, as the least any
	// write-back front door must do before it answers a write: make the
	// write durable in Redis, with one RPUSH of its arguments, one round
	// trip per write (BenchmarkWriteBound). The copy it serves is not
	// updated, there is no sequence, no pending index, no lease, no
	// applier: a bound, not a product.
	buffer *redis.Client
	prefix string
	lists  string        // the lists' names after prefix, before the record's key
	script bool          // with buffer: each write is one call of boundWriteScript instead of RPUSH
	apply  *boundApplier // with buffer: the writes are applied to the database too
}

// startMapServer copies the hashes under prefix (spec.Records of them) and
// serves them by their names without the prefix; with buffer it takes
// HSET too, into lists under prefix.
func startMapServer(ctx context.Context, rdb *redis.Client, prefix string, buffer bool) (*mapServer, error) {
	s := &mapServer{replies: make(map[string][]byte, spec.Records), prefix: prefix, lists: "bound:"}
	if buffer {
		s.buffer = rdb
	}
	for rec := range spec.Records {
		k := ycsb.Key(rec)
		h, err := rdb.HGetAll(ctx, prefix+k).Result()
		if err != nil {
			return nil, err
		}
		if len(h) != spec.Fields {
			return nil, fmt.Errorf("the reference server: %s has %d fields", prefix+k, len(h))
		}
		var buf []byte
		buf = redcon.AppendArray(buf, 2*len(h))
		for f, v := range h {
			buf = redcon.AppendBulkString(buf, f)
			buf = redcon.AppendBulkString(buf, v)
		}
		s.replies[k] = buf
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.ln = ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c)
			}()
		}
	}()
	return s, nil
}

func (s *mapServer) addr() string { return s.ln.Addr().String() }

// serve answers one connection: every command it read is answered, then
// the answers go in one write, as a server that batches its replies does.
func (s *mapServer) serve(c net.Conn) {
	defer c.Close()
	rd := redcon.NewReader(c)
	var out []byte
	for {
		cmds, err := rd.ReadCommands()
		if err != nil {
			return
		}
		out = out[:0]
		for _, cmd := range cmds {
			if len(cmd.Args) == 2 && bytes.EqualFold(cmd.Args[0], []byte("hgetall")) {
				if r, ok := s.replies[string(cmd.Args[1])]; ok {
					out = append(out, r...)
					continue
				}
				out = redcon.AppendArray(out, 0)
				continue
			}
			if s.buffer != nil && len(cmd.Args) >= 4 && bytes.EqualFold(cmd.Args[0], []byte("hset")) {
				if err := s.write(string(cmd.Args[1]), cmd.Args[2:]); err != nil {
					out = redcon.AppendError(out, "ERR "+err.Error())
					continue
				}
				out = redcon.AppendInt(out, 0)
				continue
			}
			out = redcon.AppendError(out, "ERR the reference server knows only HGETALL and HSET, not "+strings.ToUpper(string(cmd.Args[0])))
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// write makes an HSET of record key durable in Redis — one RPUSH of its
// field value pairs, or with script one call of boundWriteScript — and
// notes it for the applier, if there is one.
func (s *mapServer) write(key string, pairs [][]byte) error {
	ctx := context.Background()
	list := s.prefix + s.lists + key
	elems := int64(len(pairs))
	if s.script {
		args := make([]any, 0, 1+len(pairs))
		args = append(args, bytes.Join(pairs, []byte{'='}))
		for _, p := range pairs {
			args = append(args, p)
		}
		keys := []string{list, s.prefix + s.lists + "entry:" + key, s.prefix + s.lists + "seq", s.prefix + s.lists + "pending"}
		if err := boundWriteScript.Run(ctx, s.buffer, keys, args...).Err(); err != nil {
			return err
		}
		elems = 1
	} else {
		vals := make([]any, len(pairs))
		for i, p := range pairs {
			vals[i] = p
		}
		if err := s.buffer.RPush(ctx, list, vals...).Err(); err != nil {
			return err
		}
	}
	if s.apply != nil {
		s.apply.note(key, pairs, elems)
	}
	return nil
}

func (s *mapServer) close() {
	s.ln.Close()
	s.wg.Wait()
	if s.apply != nil {
		s.apply.close()
	}
}
