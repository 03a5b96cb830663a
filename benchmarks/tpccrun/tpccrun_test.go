package tpccrun

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/tpcc"
	"github.com/writeback/writeback/internal/testenv"
)

// TestParseFlagsStores: --store picks the store and its default DSN (an
// explicit --dsn wins), --store-latency takes whole milliseconds, and
// anything else is refused with the flag's name.
func TestParseFlagsStores(t *testing.T) {
	o, err := parseFlags([]string{"--store", "mysql", "--store-latency", "1ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.dsn != "root@tcp(127.0.0.1:3306)/tpcc" || o.latency != time.Millisecond || o.name() != "tpcc-mysql-1ms" {
		t.Errorf("--store mysql --store-latency 1ms: dsn %q, latency %v, files %s", o.dsn, o.latency, o.name())
	}
	o, err = parseFlags([]string{"--dsn", "postgres://u@h:5/x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.store != "postgres" || o.dsn != "postgres://u@h:5/x" || o.latency != 0 || o.name() != "tpcc-postgres" {
		t.Errorf("defaults: store %q, dsn %q, latency %v, files %s", o.store, o.dsn, o.latency, o.name())
	}
	for _, args := range [][]string{{"--store", "oracle"}, {"--store-latency", "1500us"}, {"--store-latency", "-1ms"}, {"--store-latency", "fast"}, {"--rounds", "0"},
		{"--require", "write-back>=2"}, {"--require", "write-back/oracle>=2"}, {"--require", "write-back/database>=0"}, {"--require", "write-back/write-back>=1"}, {"--require", "A:write-back/database>=2"}, {"--require", "update-p50(write-back/database)<=0.5"},
		{"--policies", "database,write-back", "--require", "write-back/write-through>=2"}} {
		flag := args[len(args)-2]
		if _, err := parseFlags(args, io.Discard); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(flag, "--")) {
			t.Errorf("%v: error %v, want one naming %s", args, err, flag)
		}
	}
}

// TestRoundRatios: a pair's ratio is taken within each round, in the
// rounds' order, skipping a round that lacks either policy; the ratios'
// median is the middle one (the mean of the two middle ones), and
// --require's clauses are met exactly when it reaches their minimum.
func TestRoundRatios(t *testing.T) {
	run := func(round int, policy string, tpm float64) tpcc.Outcome {
		var o tpcc.Outcome
		o.Round, o.Policy, o.TpmC = round, policy, tpm
		return o
	}
	runs := []tpcc.Outcome{
		run(1, "write-through", 100), run(1, "write-back", 210),
		run(2, "write-through", 120), run(2, "write-back", 228),
		run(3, "write-through", 90), run(3, "write-back", 207),
		run(4, "write-back", 500),
	}
	got := roundRatios(runs, "write-back", "write-through")
	want := []float64{2.1, 1.9, 2.3}
	if len(got) != len(want) {
		t.Fatalf("ratios %v, want %v", got, want)
	}
	for i := range want {
		if d := got[i] - want[i]; d > 1e-9 || d < -1e-9 {
			t.Fatalf("ratios %v, want %v", got, want)
		}
	}
	if m := bench.Median(got); m != 2.1 {
		t.Errorf("median of %v = %v, want 2.1", got, m)
	}
	if m := bench.Median([]float64{3, 1, 2, 4}); m != 2.5 {
		t.Errorf("median of 3 1 2 4 = %v, want 2.5", m)
	}
	if one := roundRatios([]tpcc.Outcome{run(0, "database", 50), run(0, "write-back", 100)}, "write-back", "database"); len(one) != 1 || one[0] != 2 {
		t.Errorf("one round: %v, want [2]", one)
	}
	o, err := parseFlags([]string{"--require", "write-back/write-through>=2, write-back/database>=2.2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	vs := judge(o.require, append(runs, run(1, "database", 100), run(2, "database", 100), run(3, "database", 100)))
	if len(vs) != 2 || !vs[0].Met || vs[0].Median != 2.1 || len(vs[0].Rounds) != 3 || vs[1].Met || vs[1].Ratio != "write-back / database" || vs[1].Median != 2.1 {
		t.Errorf("judged %+v: want write-back / write-through 2.1 met and write-back / database 2.1 not (≥ 2.2)", vs)
	}
	if label(run(2, "write-back", 0)) != "write-back #2" || label(run(0, "write-back", 0)) != "write-back" {
		t.Errorf("labels %q, %q", label(run(2, "write-back", 0)), label(run(0, "write-back", 0)))
	}
}

// TestMySQLRemote runs the command on MariaDB behind a 1 ms latency proxy,
// the database alone beside write-back at a tiny scale: both pass the
// checks, the report names the store and the latency, and the database
// alone's New-Orders went through the proxy (at least two round trips of
// 2 ms: the reads and the district's row lock, before the statements).
func TestMySQLRemote(t *testing.T) {
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = "tpcc_cmd_test"
	out := t.TempDir()
	args := []string{"--store", "mysql", "--dsn", cfg.FormatDSN(), "--redis", testenv.RedisAddr(t), "--store-latency", "1ms",
		"--policies", "database,write-back", "--warehouses", "1", "--terminals", "2", "--items", "200", "--customers", "20",
		"--warmup", "0s", "--duration", "1500ms", "--out", out}
	var stdout, stderr bytes.Buffer
	if code := Main(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "tpcc-mysql-1ms.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Store != "mysql" || rep.StoreLatencyMs != 1 || len(rep.Policies) != 2 {
		t.Fatalf("report: store %q, latency %d ms, %d policies", rep.Store, rep.StoreLatencyMs, len(rep.Policies))
	}
	for _, p := range rep.Policies {
		if !p.Check.OK() || p.Work.NewOrders == 0 {
			t.Errorf("%s: %d New-Orders, check %+v", p.Policy, p.Work.NewOrders, p.Check)
		}
	}
	if no := rep.Policies[0].Kinds["new-order"]; no.Latency.P50 < 4 {
		t.Errorf("the database alone's New-Order p50 %.2f ms; through a 1 ms proxy it takes at least two 2 ms round trips", no.Latency.P50)
	}
}
