package benchmarks

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// BenchmarkMyPatchShape measures what MariaDB/MySQL spends per row on the
// three ways a batch of one-field updates of existing rows can be sent,
// each batch one transaction in one multi-statement packet as the
// appliers send theirs:
//
//	join  one UPDATE per field joined with its rows as a derived table,
//	      UPDATE t JOIN (SELECT ? AS k, ? AS v UNION ALL SELECT …) … (the
//	      appliers' statement before session 33)
//	case  one UPDATE per field, each row's value picked by a CASE on the
//	      key, UPDATE t SET f = CASE k WHEN ? THEN ? … END WHERE k IN (…)
//	      (myUpdateCase, the appliers' statement now)
//	rows  one UPDATE per row
//
// Two batch shapes: YCSB A's (a batch of 100 records, each updating one
// of ten fields at random: ten statements of about ten rows) and the
// drain's (100 records, one field: one statement). Metrics per shape and
// way: rows/s from one client, and mariadbd's CPU time per row (µs; /proc
// counts it in 10 ms ticks, so give it a second or a few hundred batches:
// -benchtime 1s or 300x).
func BenchmarkMyPatchShape(b *testing.B) {
	cfg, err := mysql.ParseDSN(myDSN)
	if err != nil {
		b.Fatal(err)
	}
	cfg.InterpolateParams, cfg.MultiStatements = true, true
	db := myOpen(b, cfg, 1)
	ctx := context.Background()
	if err := db.PingContext(ctx); err != nil {
		b.Fatalf("MariaDB at %s: %v (start it with `bash scripts/services.sh up`)", myDSN, err)
	}
	const records, fields, batch = 10_000, 10, 100
	var rnd [4]byte
	_, _ = crand.Read(rnd[:])
	t := "bench_patchshape_" + hex.EncodeToString(rnd[:])
	cols := make([]string, fields)
	for i := range cols {
		cols[i] = fmt.Sprintf("field%d", i)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+t+" (k VARCHAR(64) COLLATE utf8mb4_nopad_bin PRIMARY KEY, "+
		strings.Join(cols, " TEXT, ")+" TEXT)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+t) })
	key := func(i int) string { return fmt.Sprintf("user%d", i) }
	for i := 0; i < records; i += 500 {
		var sb strings.Builder
		var args []any
		sb.WriteString("INSERT INTO " + t + " (k, field0) VALUES ")
		for j := i; j < i+500; j++ {
			if j > i {
				sb.WriteString(", ")
			}
			sb.WriteString("(?, ?)")
			args = append(args, key(j), strings.Repeat("x", 100))
		}
		if _, err := db.ExecContext(ctx, sb.String(), args...); err != nil {
			b.Fatal(err)
		}
	}
	ways := map[string]func(sb *strings.Builder, args []any, f string, keys, vals []string) []any{
		"join": func(sb *strings.Builder, args []any, f string, keys, vals []string) []any {
			return myUpdateJoin(sb, args, t, "k", f, keys, vals)
		},
		"case": func(sb *strings.Builder, args []any, f string, keys, vals []string) []any {
			return myUpdateCase(sb, args, t, "k", f, keys, vals)
		},
		"rows": func(sb *strings.Builder, args []any, f string, keys, vals []string) []any {
			for i := range keys {
				if i > 0 {
					sb.WriteString("; ")
				}
				fmt.Fprintf(sb, "UPDATE %s SET %s = ? WHERE k = ?", t, f)
				args = append(args, vals[i], keys[i])
			}
			return args
		},
	}
	for _, shape := range []struct {
		name   string
		fields int
	}{{"A", fields}, {"drain", 1}} {
		for _, way := range []string{"join", "case", "rows"} {
			b.Run(shape.name+"/"+way, func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				var p phase
				for n := range b.N {
					// batch distinct records, grouped by the field each updates
					byField := map[int][]string{}
					for _, r := range rng.Perm(records)[:batch] {
						f := rng.IntN(shape.fields)
						byField[f] = append(byField[f], key(r))
					}
					var sb strings.Builder
					var args []any
					sb.WriteString("START TRANSACTION")
					for f := range shape.fields {
						keys := byField[f]
						if len(keys) == 0 {
							continue
						}
						vals := make([]string, len(keys))
						for i := range vals {
							vals[i] = fmt.Sprintf("%s-%d-%d", way, n, i)
						}
						sb.WriteString("; ")
						args = ways[way](&sb, args, cols[f], keys, vals)
					}
					sb.WriteString("; COMMIT")
					if err := p.run(way, func() error {
						_, err := db.ExecContext(ctx, sb.String(), args...)
						return err
					}); err != nil {
						b.Fatal(err)
					}
				}
				rows := float64(b.N * batch)
				b.ReportMetric(rows/p.took.Seconds(), "rows/s")
				if cpu, ok := p.cpu["mariadbd"]; ok {
					b.ReportMetric(float64(cpu.Microseconds())/rows, "mariadbd-us/row")
				}
			})
		}
	}
}

// myUpdateJoin appends to sb the UPDATE of field f of the rows keyed k of
// table t joined with the rows as a derived table of SELECTs (the
// appliers' statement before myUpdateCase), and returns args with the
// rows' arguments appended.
func myUpdateJoin(sb *strings.Builder, args []any, t, k, f string, keys, vals []string) []any {
	fmt.Fprintf(sb, "UPDATE %s AS t JOIN (", t)
	for i := range keys {
		if i == 0 {
			sb.WriteString("SELECT ? AS k, ? AS f")
		} else {
			sb.WriteString(" UNION ALL SELECT ?, ?")
		}
		args = append(args, keys[i], vals[i])
	}
	fmt.Fprintf(sb, ") AS v ON t.%s = v.k SET t.%s = v.f", k, f)
	return args
}
