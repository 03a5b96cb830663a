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
	for _, args := range [][]string{{"--store", "oracle"}, {"--store-latency", "1500us"}, {"--store-latency", "-1ms"}, {"--store-latency", "fast"}} {
		if _, err := parseFlags(args, io.Discard); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(args[0], "--")) {
			t.Errorf("%v: error %v, want one naming %s", args, err, args[0])
		}
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
