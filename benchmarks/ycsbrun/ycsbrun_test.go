package ycsbrun

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/ycsb"
	"github.com/writeback/writeback/internal/config"
)

// These tests need the project's Redis and PostgreSQL: `make services`.
// They fail, never skip, when a service is down.

func pgDSN() string {
	if v := os.Getenv("WRITEBACK_TEST_PG_DSN"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/writeback?sslmode=disable"
}

func redisAddr() string {
	if v := os.Getenv("WRITEBACK_TEST_REDIS"); v != "" {
		return v
	}
	return "127.0.0.1:6379"
}

// tinyArgs are the flags of a run small enough for `make test`: workloads A
// and S on PostgreSQL, the database alone, write-back over HTTP, over the
// Redis protocol and embedded, and a two-point applier sweep of workload A.
func tinyArgs(t *testing.T, out string) []string {
	return []string{
		"--store", "postgres", "--pg-dsn", pgDSN(), "--redis", redisAddr(),
		"--workloads", "A,S", "--policies", "database,write-back,write-back-resp,write-back-embedded",
		"--records", "400", "--threads", "4", "--duration", "500ms", "--warmup", "100ms", "--distribution", "uniform", "--cache", "warm",
		"--sweep-workers", "1,2", "--sweep-workloads", "A", "--sweep-duration", "300ms",
		"--table", fmt.Sprintf("ycsb_cmd_test_%d", time.Now().UnixNano()%1e9), "--out", out,
	}
}

// readReport reads the PostgreSQL report a run wrote under out.
func readReport(t *testing.T, out string) report {
	t.Helper()
	var rep report
	b, err := os.ReadFile(filepath.Join(out, "ycsb-postgres.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestSmoke runs the command in miniature and checks its table, JSON and
// plots: every run verified (no failed operation, no stale read, every
// updated field as acknowledged after the flush), S skipped for the Redis
// protocol with the reason, the sweep's runs with their appliers.
func TestSmoke(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), tinyArgs(t, out), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	for _, want := range []string{"YCSB on postgres", "Applier sweep on postgres", "write-back      / database", "write-back-embedded / database", respNoScan,
		"CPU time per operation of the measured window"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}

	rep := readReport(t, out)
	if len(rep.Runs) != 8 || len(rep.Sweep) != 2 {
		t.Fatalf("%d runs and %d sweep runs; want 8 (2 workloads × 4 policies) and 2", len(rep.Runs), len(rep.Sweep))
	}
	for _, r := range append(rep.Runs, rep.Sweep...) {
		name := r.Workload + " " + r.Policy
		if r.Policy == bench.WriteBackRESP && r.Workload == "S" {
			if r.Skipped != respNoScan {
				t.Errorf("%s: skipped %q; want %q", name, r.Skipped, respNoScan)
			}
			continue
		}
		if r.Skipped != "" || r.Ops == 0 || r.Throughput <= 0 {
			t.Errorf("%s: skipped %q, %d ops, %.0f ops/s; want a run", name, r.Skipped, r.Ops, r.Throughput)
		}
		if r.Errors != 0 || r.StaleReads != 0 || r.Mismatched != 0 || r.Verified == 0 {
			t.Errorf("%s: %d errors, %d stale reads, %d of %d fields mismatched; want a verified run", name, r.Errors, r.StaleReads, r.Mismatched, r.Verified)
		}
		if r.Workload == "A" && (r.Read.Count == 0 || r.Update.Count == 0 || r.Scan.Count != 0) {
			t.Errorf("%s: %d reads, %d updates, %d scans", name, r.Read.Count, r.Update.Count, r.Scan.Count)
		}
		if r.Workload == "S" && (r.Scan.Count == 0 || r.Read.Count != 0) {
			t.Errorf("%s: %d scans, %d reads", name, r.Scan.Count, r.Read.Count)
		}
		if r.CPUPerOp["self"] <= 0 {
			t.Errorf("%s: CPU per operation %v; want this process's (the clients') at least", name, r.CPUPerOp)
		}
		if r.Sidecar != (r.Policy != bench.Database) {
			t.Errorf("%s: sidecar %v", name, r.Sidecar)
		}
		// Redis per buffered write (issue 18's measure): every sidecar run
		// of A buffers writes, each of which runs the write script.
		if r.Sidecar && r.Workload == "A" && (r.BufferedChanges <= 0 || r.RedisScriptUsPerWr <= 0 || r.RedisCPUUsPerWr <= 0) {
			t.Errorf("%s: %.0f buffered changes, %.1f µs in scripts and %.1f µs of Redis CPU per change; want all above 0", name,
				r.BufferedChanges, r.RedisScriptUsPerWr, r.RedisCPUUsPerWr)
		}
		// Idle appliers poll up to 800 ms apart: a short run may end before
		// they apply anything, but its changes are applied or pending.
		if r.Sidecar && (r.AppliedPercent < 0 || r.AppliedPercent > 100 || r.AppliedChanges+float64(r.PendingChanges) == 0 ||
			len(r.PinnedOverTime) == 0 || r.Workers == 0) {
			t.Errorf("%s: applied %.0f changes (%.1f%%), %d pending, %d pinned samples, %d workers", name, r.AppliedChanges, r.AppliedPercent,
				r.PendingChanges, len(r.PinnedOverTime), r.Workers)
		}
	}
	if rep.Sweep[0].Workers != 1 || rep.Sweep[1].Workers != 2 {
		t.Errorf("sweep workers %d, %d; want 1, 2", rep.Sweep[0].Workers, rep.Sweep[1].Workers)
	}
	if len(rep.Ratios) == 0 {
		t.Error("no ratios")
	}
	for _, f := range []string{"-throughput-uniform.png", "-pinned.png", "-sweep-throughput.png", "-sweep-applied.png", "-sweep-pinned.png"} {
		path := filepath.Join(out, "ycsb-postgres"+f)
		fh, err := os.Open(path)
		if err != nil {
			t.Error(err)
			continue
		}
		if _, err := png.Decode(fh); err != nil {
			t.Errorf("%s: %v", path, err)
		}
		fh.Close()
	}
}

// TestColdWarmRemote runs write-back beside the database alone with
// zipfian keys, cold and warm, behind a 1 ms latency proxy: a cold run
// starts with no cache entry in Redis (and misses), a warm one with every
// record cached; the database alone goes through the proxy too (every read
// a round trip of at least 2 ms); the side-by-side table and JSON have both
// cache states.
func TestColdWarmRemote(t *testing.T) {
	out := t.TempDir()
	const records = 200
	args := []string{
		"--store", "postgres", "--pg-dsn", pgDSN(), "--redis", redisAddr(),
		"--workloads", "A", "--policies", "database,write-back,write-back-resp", "--distribution", "zipfian", "--cache", "cold,warm",
		"--store-latency", "1ms", "--records", fmt.Sprint(records), "--threads", "4", "--duration", "400ms", "--warmup", "100ms",
		"--table", fmt.Sprintf("ycsb_cmd_test_%d", time.Now().UnixNano()%1e9), "--out", out,
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "Write-back / the database alone on postgres") {
		t.Errorf("stdout lacks the side-by-side table:\n%s", stdout.String())
	}
	rep := readReport(t, out)
	if len(rep.Runs) != 5 {
		t.Fatalf("%d runs; want 5 (the database once, write-back and write-back-resp cold and warm)", len(rep.Runs))
	}
	for _, r := range rep.Runs {
		name := r.Policy + " " + r.Cache
		if r.StoreLatencyMs != 1 || r.Distribution != "zipfian" || r.Threads != 4 || r.Ops == 0 || !r.ok() {
			t.Errorf("%s: %+v", name, r.Variant)
		}
		switch r.Cache {
		case cacheNone:
			if r.Policy != bench.Database {
				t.Errorf("%s: a sidecar run without a cache state", name)
			}
			// One round trip through the proxy per read: 1 ms each way.
			if r.Read.P50 < 2 {
				t.Errorf("%s: read p50 %.2f ms; through a 1 ms proxy a read takes at least 2 ms", name, r.Read.P50)
			}
		case cacheCold:
			if r.CacheEntriesAtStart != 0 || r.WarmupS != 0 || r.CacheHitPercent >= 100 {
				t.Errorf("%s: %d cache entries at the start, %gs warm-up, %.1f%% hits; want an empty cache, no warm-up, some misses",
					name, r.CacheEntriesAtStart, r.WarmupS, r.CacheHitPercent)
			}
		case cacheWarm:
			if r.CacheEntriesAtStart != records {
				t.Errorf("%s: %d cache entries at the start; want every record (%d)", name, r.CacheEntriesAtStart, records)
			}
		default:
			t.Errorf("%s: cache %q", name, r.Cache)
		}
	}
	if len(rep.SideBySide) != 2 {
		t.Fatalf("side by side: %+v; want A cold and A warm", rep.SideBySide)
	}
	for _, x := range rep.SideBySide {
		if x.StoreLatencyMs != 1 || x.Database == 0 || x.WriteBack == 0 || x.WriteBackRESP == 0 || x.WriteBackRatio == 0 || x.WriteBackRESPRatio == 0 {
			t.Errorf("side by side: %+v", x)
		}
	}
	if rep.SideBySide[0].Cache != cacheCold || rep.SideBySide[1].Cache != cacheWarm {
		t.Errorf("side by side cache states %q, %q", rep.SideBySide[0].Cache, rep.SideBySide[1].Cache)
	}
	if _, err := os.Stat(filepath.Join(out, "ycsb-postgres-throughput-zipfian-1ms.png")); err != nil {
		t.Error(err)
	}
}

// TestRoundsRequire runs the database alone and write-back over the Redis
// protocol in two rounds, requiring one ratio that any run meets and one
// that none can: every run carries its round, each ratio is the median of
// two rounds' ratios, the verdicts say met and NOT met, and the command
// exits 1 for the one not met.
func TestRoundsRequire(t *testing.T) {
	out := t.TempDir()
	args := []string{
		"--store", "postgres", "--pg-dsn", pgDSN(), "--redis", redisAddr(),
		"--workloads", "A", "--policies", "database,write-back-resp", "--distribution", "uniform", "--cache", "warm",
		"--records", "200", "--threads", "2", "--duration", "300ms", "--warmup", "100ms", "--rounds", "2",
		"--require", "A:write-back-resp/database>=0.01, database/write-back-resp>=1000",
		"--resp-socket",                            // the clients of write-back-resp reach its front door through a Unix socket
		"--trace", filepath.Join(out, "trace.out"), // each run's measured window
		"--table", fmt.Sprintf("ycsb_cmd_test_%d", time.Now().UnixNano()%1e9), "--out", out,
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d; want 1 (a requirement not met)\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	for _, want := range []string{"write-back-resp #2", "the median of 2 rounds", "required write-back-resp / database ≥ 0.01× on A uniform warm 2t", ", met",
		"required database / write-back-resp ≥ 1000.00× on A uniform warm 2t", "NOT met"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), "required ratios not reached") {
		t.Errorf("stderr does not say why the command failed:\n%s", stderr.String())
	}
	for _, name := range []string{"trace-ycsb-A-database-postgres-uniform-none-2t.out", "trace-ycsb-A-write-back-resp-postgres-uniform-warm-2t.out",
		"trace-ycsb-A-write-back-resp-postgres-uniform-warm-2t-2.out"} {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("--trace: %s: %v", name, err)
		}
	}
	rep := readReport(t, out)
	if !rep.Settings.RespSocket || !strings.Contains(stderr.String(), "write-back-resp over a Unix socket") {
		t.Errorf("settings %+v, log:\n%s\nwant write-back-resp over a Unix socket, said so", rep.Settings, stderr.String())
	}
	rounds := map[string][]int{}
	for _, r := range rep.Runs {
		if !r.ok() || r.Ops == 0 {
			t.Errorf("%s: not a verified run", r.policyLabel())
		}
		rounds[r.Policy] = append(rounds[r.Policy], r.Round)
	}
	if rep.Rounds != 2 || fmt.Sprint(rounds) != "map[database:[1 2] write-back-resp:[1 2]]" {
		t.Fatalf("rounds %d, runs by policy and round %v; want each policy in rounds 1 and 2", rep.Rounds, rounds)
	}
	if len(rep.Required) != 2 || !rep.Required[0].Met || rep.Required[1].Met || len(rep.Required[0].Rounds) != 2 || len(rep.Required[1].Rounds) != 2 {
		t.Errorf("required: %+v; want the first met and the second not, each judged on 2 rounds", rep.Required)
	}
	for _, x := range rep.Ratios {
		if len(x.Rounds) != 2 || x.Ratio != bench.Median(x.Rounds) {
			t.Errorf("ratio %+v: want the median of 2 rounds", x)
		}
	}
}

// TestRoundRatios checks the rounds' arithmetic on made-up runs: ratios
// within each round, skipping a round that lacks a policy; their median;
// the side by side's medians; a requirement on a pair that never ran.
func TestRoundRatios(t *testing.T) {
	v := Variant{Distribution: "zipfian", Cache: cacheWarm, Threads: 8}
	db := v
	db.Cache = cacheNone
	run := func(round int, policy string, ops float64) *Run {
		w := v
		if policy == bench.Database {
			w = db
		}
		return &Run{Round: round, Policy: policy, Workload: "A", Variant: w, Throughput: ops}
	}
	rep := &report{Settings: settings{Workloads: []string{"A"}, Distributions: []string{"zipfian"}, Caches: []string{cacheWarm},
		Threads: []int{8}, StoreLatencyMs: []int64{0}}}
	rep.Runs = []*Run{
		run(1, bench.Database, 100), run(1, bench.WriteBackRESP, 150),
		run(2, bench.Database, 200), run(2, bench.WriteBackRESP, 200),
		run(3, bench.Database, 100), run(3, bench.WriteBackRESP, 170),
		run(4, bench.WriteBackRESP, 900),
	}
	got := rep.roundRatios("A", bench.WriteBackRESP, bench.Database, v)
	if fmt.Sprint(got) != "[1.5 1 1.7]" || bench.Median(got) != 1.5 {
		t.Errorf("ratios %v (median %v); want [1.5 1 1.7], median 1.5", got, bench.Median(got))
	}
	sb := rep.sideBySide()
	if len(sb) != 1 || sb[0].Database != 100 || sb[0].WriteBackRESP != 185 || sb[0].WriteBackRESPRatio != 1.5 || sb[0].WriteBack != 0 {
		t.Errorf("side by side %+v; want the medians: 100, 185 ops/s (rounds 1-4), ratio 1.5", sb)
	}
	rep.require = []bench.Requirement{{A: bench.WriteBackRESP, B: bench.Database, Min: 1.5}, {A: bench.WriteBack, B: bench.Database, Min: 1}}
	vs := rep.judge()
	if len(vs) != 2 || !vs[0].Met || vs[0].Case != "A zipfian warm 8t" || vs[1].Met || len(vs[1].Rounds) != 0 {
		t.Errorf("verdicts %+v; want write-back-resp met at exactly 1.5 and write-back, which never ran, not met", vs)
	}
	if len(rep.unmet()) != 0 {
		t.Errorf("unmet before write: %v", rep.unmet())
	}
	rep.Required = vs
	if u := rep.unmet(); len(u) != 1 || !strings.Contains(u[0], "no round ran both") {
		t.Errorf("unmet %q", u)
	}
	// A clause naming a workload is judged on that workload alone: with B
	// among the workloads but never run, "B:" finds no round, "A:" A's.
	rep.Settings.Workloads = []string{"A", "B"}
	rep.require = []bench.Requirement{{On: "A", A: bench.WriteBackRESP, B: bench.Database, Min: 1.6}, {On: "B", A: bench.WriteBackRESP, B: bench.Database, Min: 0.1}}
	vs = rep.judge()
	if len(vs) != 2 || vs[0].Met || vs[0].Case != "A zipfian warm 8t" || vs[0].Median != 1.5 || vs[1].Met || len(vs[1].Rounds) != 0 {
		t.Errorf("verdicts %+v; want A's 1.5 below 1.6, and B, which never ran, not met", vs)
	}
	// A latency clause: write-back-resp's update p50 over the database's
	// in each round that measured both (round 3's database has none, a
	// run without updates), bounded from above.
	p50 := map[int]map[string]float64{1: {bench.Database: 4, bench.WriteBackRESP: 0.8}, 2: {bench.Database: 5, bench.WriteBackRESP: 1.5},
		3: {bench.WriteBackRESP: 0.1}, 4: {bench.WriteBackRESP: 9}}
	for _, r := range rep.Runs {
		if x, ok := p50[r.Round][r.Policy]; ok {
			r.Update = bench.Latency{Count: 10, P50: x}
		}
	}
	rep.require = []bench.Requirement{{On: "A", Metric: "update-p50", A: bench.WriteBackRESP, B: bench.Database, Max: 0.25},
		{On: "A", Metric: "update-p50", A: bench.WriteBackRESP, B: bench.Database, Max: 0.2}}
	vs = rep.judge()
	if len(vs) != 2 || !vs[0].Met || fmt.Sprint(vs[0].Rounds) != "[0.2 0.3]" || vs[0].Median != 0.25 || vs[1].Met ||
		vs[0].Ratio != "update-p50 write-back-resp / database" {
		t.Errorf("verdicts %+v; want rounds 1 and 2 (0.2, 0.3), their median 0.25 met at most 0.25 and not at most 0.2", vs)
	}
	if got := vs[1].String(); got != "required update-p50 write-back-resp / database ≤ 0.20× on A zipfian warm 8t: 0.25×, NOT met" {
		t.Errorf("verdict line %q", got)
	}
}

// TestVerificationFails tampers with an updated record between the flush
// and the verification: the command must report it and exit 1.
func TestVerificationFails(t *testing.T) {
	out := t.TempDir()
	args := tinyArgs(t, out)
	args = append(args, "--policies", "write-back", "--workloads", "A", "--sweep-workers", "")
	o, err := parseFlags(args, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	o.beforeVerify = func(ctx context.Context, db *ycsb.DB, spec ycsb.Spec, updated []string) error {
		if len(updated) == 0 {
			return fmt.Errorf("no record was updated")
		}
		return db.Exec(ctx, fmt.Sprintf("UPDATE %s SET field0 = 'tampered', field1 = 'tampered', field2 = 'tampered', field3 = 'tampered', field4 = 'tampered', field5 = 'tampered', field6 = 'tampered', field7 = 'tampered', field8 = 'tampered', field9 = 'tampered' WHERE %s = $1", spec.Table, ycsb.KeyColumn), updated[0])
	}
	var stdout, stderr bytes.Buffer
	code := execute(context.Background(), o, &stdout, &stderr)
	t.Cleanup(func() {
		db, err := ycsb.Open(context.Background(), ycsb.Postgres, pgDSN())
		if err == nil {
			_ = db.Drop(context.Background(), o.table) // kept for inspection after the failure
			db.Close()
		}
	})
	if code != 1 {
		t.Fatalf("exit %d after tampering; want 1\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "verification failed") || !strings.Contains(stderr.String(), `the database has "tampered"`) {
		t.Errorf("stderr does not report the mismatch:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "FAILED") {
		t.Errorf("the table does not show the failed run:\n%s", stdout.String())
	}
}

// TestFlags checks --quick's defaults and that bad flags are refused with
// exit code 2.
func TestFlags(t *testing.T) {
	o, err := parseFlags([]string{"--quick"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if o.records != 5_000 || o.duration != 2*time.Second || o.warmup != 500*time.Millisecond || fmt.Sprint(o.sweepWorkers) != "[1 4 16]" ||
		fmt.Sprint(o.stores) != "[postgres]" || len(o.policies) != len(bench.Policies) || fmt.Sprint(o.workloads) != "[A B C S]" {
		t.Errorf("--quick: %+v", o)
	}
	o, err = parseFlags([]string{"--quick", "--records", "50", "--sweep-workers", "2,3"}, os.Stderr)
	if err != nil || o.records != 50 || fmt.Sprint(o.sweepWorkers) != "[2 3]" {
		t.Errorf("explicit flags must win over --quick: %+v, %v", o, err)
	}
	if o.mongoURI != "mongodb://127.0.0.1:27017/" {
		t.Errorf("mongo URI %q", o.mongoURI)
	}
	o, err = parseFlags([]string{"--workloads", "A", "--require", "A:update-p50(write-back-resp/database)<=0.25, write-back/database>=1.5"}, os.Stderr)
	want := []bench.Requirement{{On: "A", Metric: "update-p50", A: bench.WriteBackRESP, B: bench.Database, Max: 0.25},
		{A: bench.WriteBack, B: bench.Database, Min: 1.5}}
	if err != nil || fmt.Sprint(o.require) != fmt.Sprint(want) {
		t.Errorf("--require with a latency clause: %+v, %v; want %+v", o.require, err, want)
	}
	for _, args := range [][]string{
		{"--workloads", "A,X"}, {"--store", "sqlite"}, {"--policies", "write-behind"}, {"--sweep-workers", "0"},
		{"--threads", "0"}, {"--records", "3", "--threads", "4"}, {"--compare=false"}, {"--distribution", "latest"}, {"extra"},
		{"--cache", "hot"}, {"--store-latency", "1500us"}, {"--store-latency", "-1ms"}, {"--store-latency", "fast"}, {"--threads", "8,x"},
		{"--rounds", "0"}, {"--policies", "database,write-back", "--require", "write-back-resp/database>=1.5"}, {"--require", "write-back/database"},
		{"--require", "write-back/database>=0"}, {"--compare=false", "--sweep-workers", "2", "--require", "write-back/database>=1"},
		{"--workloads", "A,B", "--require", "C:write-back/database>=1"}, {"--require", ":write-back/database>=1"},
		{"--hold-appliers", "--sweep-workers", "1,4"},
		{"--require", "scan-p50(write-back/database)<=1"}, {"--require", "update-p50(write-back/database<=1"},
		{"--require", "update-p50(write-back/database)<=0"},
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), args, &bytes.Buffer{}, &stderr); code != 2 {
			t.Errorf("%v: exit %d; want 2", args, code)
		}
	}
}

// --hold-appliers gives the sidecars a configuration that validates and
// whose appliers poll less often than any run lasts; without it they keep
// the sidecar's schedule.
func TestHoldAppliers(t *testing.T) {
	sidecar := func(o *options) *config.Config {
		t.Helper()
		c, err := config.Parse("test", []byte(`listen: 127.0.0.1:0
redis: {addrs: ["127.0.0.1:6379"]}
stores: {db: {driver: postgres, dsn: "postgres://x@127.0.0.1/x"}}
collections: {t: {store: db, table: t, key: id, policy: write-back}}
`))
		if err != nil {
			t.Fatal(err)
		}
		o.configure(0, 0)(c)
		if err := c.Validate(); err != nil {
			t.Fatalf("the sidecar's configuration: %v", err)
		}
		return c
	}
	o, err := parseFlags([]string{"--quick", "--sweep-workers", "", "--hold-appliers", "--duration", "10m"}, os.Stderr)
	if err != nil || !o.holdAppliers {
		t.Fatalf("--hold-appliers: %+v, %v", o, err)
	}
	if poll := sidecar(o).Writeback.PollInterval.Duration; poll <= o.warmup+o.duration {
		t.Errorf("held appliers poll every %v: within a run of %v", poll, o.warmup+o.duration)
	}
	o, err = parseFlags([]string{"--quick"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sidecar(o).Writeback.PollInterval, config.Default().Writeback.PollInterval; got != want {
		t.Errorf("without --hold-appliers the appliers poll every %v; want the default %v", got, want)
	}
	if got, want := sidecar(o).Writeback.ApplyDelay, config.Default().Writeback.ApplyDelay; got != want {
		t.Errorf("without --apply-delay the sidecars' applyDelay is %v; want the default %v", got, want)
	}
	o, err = parseFlags([]string{"--quick", "--apply-delay", "1s"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if got := sidecar(o).Writeback.ApplyDelay.Duration; got != time.Second {
		t.Errorf("--apply-delay 1s: the sidecars' applyDelay is %v", got)
	}
	o, err = parseFlags([]string{"--quick", "--poll-interval", "400ms"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if got := sidecar(o).Writeback.PollInterval.Duration; got != 400*time.Millisecond {
		t.Errorf("--poll-interval 400ms: the appliers poll every %v", got)
	}
	for _, args := range [][]string{
		{"--quick", "--sweep-workers", "", "--hold-appliers", "--poll-interval", "400ms"},
		{"--quick", "--poll-interval", "-1s"},
	} {
		if _, err := parseFlags(args, os.Stderr); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// With --hold-appliers a write-back run applies nothing until its flush —
// every change it buffered is pending at its end, and the flush applies
// them, verified — while the same run without it applies as it goes.
func TestHoldAppliersRun(t *testing.T) {
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprint("hold=", hold), func(t *testing.T) {
			out := t.TempDir()
			args := []string{
				"--store", "postgres", "--pg-dsn", pgDSN(), "--redis", redisAddr(),
				"--workloads", "A", "--policies", "write-back-resp", "--distribution", "uniform", "--cache", "warm",
				"--records", "200", "--threads", "2", "--duration", "1s", "--warmup", "200ms", "--sweep-workers", "",
				"--table", fmt.Sprintf("ycsb_hold_test_%d", time.Now().UnixNano()%1e9), "--out", out,
			}
			if hold {
				args = append(args, "--hold-appliers")
			}
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
			}
			rep := readReport(t, out)
			if len(rep.Runs) != 1 || rep.Settings.HoldAppliers != hold {
				t.Fatalf("runs %d, settings %+v", len(rep.Runs), rep.Settings)
			}
			r := rep.Runs[0]
			if !r.ok() || r.Ops == 0 || r.Verified == 0 {
				t.Fatalf("not a verified run: %+v", r)
			}
			if hold {
				if r.AppliedChanges != 0 || r.ApplierBatches != 0 || r.PendingChanges == 0 || r.FlushApplied == 0 {
					t.Errorf("held: %v changes applied in %d batches during the run, %d pending at its end, %d applied by the flush; want 0, 0, >0, >0",
						r.AppliedChanges, r.ApplierBatches, r.PendingChanges, r.FlushApplied)
				}
			} else if r.AppliedChanges == 0 {
				t.Errorf("running appliers applied nothing during the run (%d pending at its end)", r.PendingChanges)
			}
		})
	}
}
