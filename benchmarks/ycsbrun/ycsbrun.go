package ycsbrun

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
)

// Main is the ycsb command: it parses args as its flags, runs, prints its
// tables to stdout and its progress to stderr, and returns the exit code (0
// success, 1 a failed or unverified run, 2 bad flags).
//
// It runs workloads A (50 % reads, 50 % updates), B (95/5), C (100 %
// reads) and S (95 % scans of 5 records from a random key, 5 % updates)
// against PostgreSQL, MariaDB or MongoDB, under every policy of package
// bench — the database alone, its own asynchronous commit, and a sidecar
// with write-around, write-through and write-back over HTTP and write-back
// over the Redis protocol — and, with --sweep-workers, the paper's applier
// sweep (Figure 5): write-back runs of A, B and S with each number of
// appliers (writeback.workers).
//
// For each store, store latency (--store-latency), number of threads
// (--threads) and policy, Main loads a fresh table (MongoDB: a collection
// in database ycsb, _id = key), starts a fresh sidecar (Redis key prefix
// ycsb-<policy>-<random>) or opens direct clients, and runs on them each
// workload with each key distribution (--distribution: uniform, zipfian)
// in each cache state (--cache):
//   - warm: every record is read once through the run's own clients (a
//     warm cache and buffer pool, as in the paper), unless the cache is
//     still warm from the run before — entries live an hour and writes
//     update them — except under write-around, whose writes delete
//     entries; then a warm-up and the measured window;
//   - cold: the collection's cache entries are dropped from Redis (the run
//     records how many remain: 0) and there is no warm-up, so the measured
//     window starts on an empty cache; the database's buffer pool stays
//     warm from the load and the runs before.
//
// The database alone has no cache and runs once per workload and
// distribution (cache "none"); the ratios set each cache state of the
// sidecar against it. After each run the sidecar is drained (flush) and the
// table compared with the last acknowledged value of every updated field;
// every read (and scanned record) of a client's own record is also checked
// against its last acknowledged write during the run. A mismatch, a stale
// read or a failed operation fails the command (exit 1) once the tables are
// printed, and the table is kept for inspection.
//
// A store latency above 0 puts the store behind a proxy on a free loopback
// port (Shopify's toxiproxy, in-process, a latency toxic on each
// direction: whole milliseconds) for everything the runs send it — the
// database alone's clients and the sidecar's store connections alike — so
// the ratio compares both at the same distance; Redis stays local. Loading
// and verification connect directly.
//
// Choices:
//   - A read reads the whole record. An update sets one random field, as
//     YCSB's core workload does by default; --update-all sets every field
//     in one operation, as the paper does.
//   - Scans: the HTTP API's GET /v1/docs/{collection}?from=&limit=. The
//     Redis-protocol front door has no scan command, so write-back-resp
//     skips workload S (reported as n/a with the reason); it also serves SQL
//     collections only, so it does not run on MongoDB at all.
//   - Keys: uniform, as in the paper, and zipfian, YCSB's default (its
//     scrambled zipfian, constant 0.99, go-ycsb's generator).
//   - database-async is PostgreSQL's synchronous_commit=off (per
//     connection), MariaDB's innodb_flush_log_at_trx_commit=2 (global, set
//     for the run and restored) or MongoDB's w=1, journal=false.
//   - The sweep: a fresh sidecar per applier count, workloads of
//     --sweep-workloads on it; throughput normalized to the first count,
//     and, when the measured window closes, the changes applied since the
//     workload started / (applied + pending) and the pinned bytes.
//   - MongoDB here is FerretDB on SQLite, which needs 0.1–0.3 s per
//     document operation on a collection of a few thousand documents: use
//     a few hundred --records there; the sidecars' writeback.batchSize is
//     16 on MongoDB (--batch-size), since a batch of 128 outlives the
//     appliers' 30 s batch timeout and would be retried forever.
//
// It prints a table per store on stdout — every run with its variant, the
// ratios, and write-back (HTTP and Redis protocol) / the database alone side
// by side per workload (A, B, C), distribution, cache state, store latency
// and threads — and writes under --out: ycsb-<store>.json (settings, every
// run with its variant, latency percentiles, cache entries at the start,
// verification, buffer state and pinned bytes over time, ratios, the side
// by side, the sweep), ycsb-<store>-throughput-<distribution>[-<n>ms][-<n>t].png
// (ops/s per workload, cache state and policy, the analogue of Figure 9),
// ycsb-<store>-pinned.png (pinned bytes over time in the warm write-back
// runs, sampled every 250 ms) and, with the sweep (warm, the first
// distribution, store latency and number of threads),
// ycsb-<store>-sweep-{throughput,applied,pinned}.png (Figure 5a–c). Progress
// (a line per second per run) goes to stderr. Run `make services` first.
//
// With --rounds n the comparison runs n times in turn (round 1 runs every
// policy once, then round 2 …), and every ratio is the median of the
// rounds' ratios, each taken within its round: on a machine whose speed
// drifts by ±20 % over minutes, runs side by side are what can be
// compared. The table's throughputs (side by side, plots) are the rounds'
// medians. --require write-back-resp/database>=1.5 makes the command fail
// (exit 1) unless that median reaches 1.5 on every workload and variant
// where both policies ran; each clause is reported as met or not.
func Main(args []string, stdout, stderr io.Writer) int {
	return run(context.Background(), args, stdout, stderr)
}

// run is Main with a context of the caller's.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return bench.Command(ctx, "ycsb", args, stdout, stderr, parseFlags, execute)
}

// execute runs the stores in turn and returns the exit code.
func execute(ctx context.Context, o *options, stdout, stderr io.Writer) int {
	started := time.Now()
	failed := false
	if o.cpuprof != "" {
		stop, err := bench.StartCPUProfile(o.cpuprof)
		if err != nil {
			fmt.Fprintln(stderr, "ycsb:", err)
			return 1
		}
		defer stop()
	}
	if o.memprof != "" {
		defer func() {
			if err := bench.WriteAllocProfile(o.memprof); err != nil {
				fmt.Fprintln(stderr, "ycsb:", err)
			}
		}()
	}
	for _, store := range o.stores {
		rep, err := runStore(ctx, o, store, stderr)
		if rep != nil {
			werr := rep.write(o.out)
			rep.print(stdout)
			if werr != nil {
				fmt.Fprintln(stderr, "ycsb:", werr)
				failed = true
			}
			if unmet := rep.unmet(); err == nil && len(unmet) > 0 {
				fmt.Fprintf(stderr, "ycsb: %s: required ratios not reached: %s\n", store, strings.Join(unmet, "; "))
				failed = true
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "ycsb: %s: %v\n", store, err)
			failed = true
			break
		}
	}
	fmt.Fprintf(stderr, "ycsb: done in %s\n", time.Since(started).Round(time.Second))
	if failed {
		return 1
	}
	return 0
}
