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
	for _, want := range []string{"YCSB on postgres", "Applier sweep on postgres", "write-back      / database", "write-back-embedded / database", respNoScan} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}

	var rep report
	b, err := os.ReadFile(filepath.Join(out, "ycsb-postgres.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
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
		if r.Sidecar != (r.Policy != bench.Database) {
			t.Errorf("%s: sidecar %v", name, r.Sidecar)
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
	var rep report
	b, err := os.ReadFile(filepath.Join(out, "ycsb-postgres.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
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
	for _, args := range [][]string{
		{"--workloads", "A,X"}, {"--store", "sqlite"}, {"--policies", "write-behind"}, {"--sweep-workers", "0"},
		{"--threads", "0"}, {"--records", "3", "--threads", "4"}, {"--compare=false"}, {"--distribution", "latest"}, {"extra"},
		{"--cache", "hot"}, {"--store-latency", "1500us"}, {"--store-latency", "-1ms"}, {"--store-latency", "fast"}, {"--threads", "8,x"},
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), args, &bytes.Buffer{}, &stderr); code != 2 {
			t.Errorf("%v: exit %d; want 2", args, code)
		}
	}
}
