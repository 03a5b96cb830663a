package tpccrun

import (
	"io"
	"strings"
	"testing"
	"time"
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
