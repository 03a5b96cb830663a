package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/writeback/writeback/pkg/client"
)

// The session SQL trust boundary on both databases, through a sidecar
// process: each hostile statement would change a balance if it ran; each
// is refused with a 400 before anything is buffered, and a flush after
// them commits nothing.
func TestSessionSQLBoundary(t *testing.T) {
	for _, db := range []string{"pg", "maria"} {
		t.Run(db, func(t *testing.T) {
			b := newBank(t, db, 1, 2, 100)
			addr := freeAddr(t)
			sc := start(t, b.config(addr, "", ""), addr)
			ctx := context.Background()
			acct := b.account
			type stmt struct {
				name, sql string
				args      []any
				msg       string
			}
			cases := []stmt{
				{"comment", fmt.Sprintf("UPDATE %s SET balance = balance + %s WHERE branch = 0 AND id = 0 /* x */", acct, b.ph(1)), []any{1}, "comment"},
				{"other table", fmt.Sprintf("UPDATE %s SET balance = balance + %s", b.account+"x", b.ph(1)), []any{1}, "is not declared"},
			}
			if db == "pg" {
				cases = append(cases,
					stmt{"quoted pg_sleep", fmt.Sprintf(`UPDATE %s SET balance = balance + $1 WHERE branch = 0 AND id = 0 AND "pg_sleep"($2) IS NULL`, acct), []any{1, 0}, `"pg_sleep" at byte`},
					stmt{"pg_catalog.set_config", fmt.Sprintf(`UPDATE %s SET balance = balance + length(pg_catalog."set_config"($1, $2, false)) WHERE branch = 0 AND id = 0`, acct), []any{"application_name", "x"}, "pg_catalog.…"},
					stmt{"slice with nextval", fmt.Sprintf(`UPDATE %s SET balance = balance + (ARRAY[1,2])[1:nextval($1)] WHERE branch = 0 AND id = 0`, acct), []any{"s"}, "ARRAY at byte"},
				)
			} else {
				cases = append(cases,
					stmt{"quoted load_file", fmt.Sprintf("UPDATE %s SET balance = balance + length(`load_file`(?)) WHERE branch = 0 AND id = 0", acct), []any{"/etc/hostname"}, `"load_file" at byte`},
					stmt{"db-qualified function", fmt.Sprintf("UPDATE %s SET balance = balance + length(`mysql`.`load_file`(?)) WHERE branch = 0 AND id = 0", acct), []any{"/etc/hostname"}, "mysql.…"},
					stmt{"comma join", fmt.Sprintf("UPDATE %s a, %s s SET a.balance = a.balance + s.n WHERE a.id = ?", acct, b.qseq), []any{0}, "UPDATE of several tables"},
					stmt{"user variable", fmt.Sprintf("UPDATE %s SET balance = balance + (@x := ?) WHERE branch = 0 AND id = 0", acct), []any{1}, "operator @"},
					stmt{"upper-case table", fmt.Sprintf("UPDATE %s SET balance = balance + ?", strings.ToUpper(acct)), []any{1}, "is not declared"},
				)
			}
			for _, tc := range cases {
				s := begin(t, sc)
				_, err := sc.c.CommitSession(ctx, s.id, client.Commit{Queue: b.queue(0), Statements: []client.Statement{{SQL: tc.sql, Args: tc.args}}})
				if !client.IsInvalid(err) || !strings.Contains(err.Error(), tc.msg) {
					t.Errorf("%s: %v, want a 400 containing %q", tc.name, err, tc.msg)
				}
			}
			flushQueues(t, sc)
			b.wantBalances(t, map[int]map[int]int64{0: {0: 100, 1: 100}})
			if n := b.appliedSessions(); n != 0 {
				t.Errorf("%d sessions applied; want none", n)
			}
		})
	}
}
