package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/pkg/client"
)

// A change PostgreSQL refuses because its value is too large for an index
// row (SQLSTATE 54000, "index row size … exceeds btree version 4 maximum
// 2704") is isolable: after maxRetries failed rounds it is dead-lettered
// alone, and every other change batched with it reaches the store.
func TestStuckIndexRowTooLarge(t *testing.T) {
	big := make([]byte, 2000)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	// 4000 random hex digits: incompressible enough to stay above the
	// 2704 bytes a btree row may hold.
	stuckChange(t, "pg", hex.EncodeToString(big), "54000", "exceeds btree", "", func(e *env) {
		e.exec(e.dbs["pg"], fmt.Sprintf("CREATE INDEX %s_s ON %s (s)", e.table, e.table))
	})
}

// A change whose statement runs out of its time (statement_timeout,
// SQLSTATE 57014: a trigger sleeps on one value) is isolable: after
// maxRetries failed rounds it is dead-lettered alone, and every other
// change batched with it reaches the store. The timeout is a run-time
// parameter of this sidecar's DSN only (as an operator would set it, and
// as ALTER ROLE … SET would for every session of the role): other tests
// share the role and the database.
func TestStuckStatementTimeout(t *testing.T) {
	stuckChange(t, "pg", "slow", "57014", "statement timeout", "statement_timeout=1000", func(e *env) {
		fn := e.table + "_slow"
		e.exec(e.dbs["pg"], fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.s = 'slow' THEN PERFORM pg_sleep(10); END IF;
  RETURN NEW;
END $$`, fn))
		e.exec(e.dbs["pg"], fmt.Sprintf("CREATE TRIGGER %s BEFORE INSERT OR UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION %s()", fn, e.table, fn))
		e.t.Cleanup(func() {
			_, _ = e.dbs["pg"].Exec("DROP TABLE IF EXISTS " + e.table)
			_, _ = e.dbs["pg"].Exec("DROP FUNCTION IF EXISTS " + fn + "()")
		})
	})
}

// stuckChange writes document 1's s = bad, then its n += 7, and n = id
// to documents 2..docs of db's collection (set up by install, with
// dsnParam, key=value, added to the sidecar's DSN of db), then a second
// wave of n += 1000 to them: the bad change alone must become a dead
// letter carrying code and msg, after maxRetries (2) failed rounds;
// everything else, document 1's later change included, must reach the
// store.
func stuckChange(t *testing.T, db, bad, code, msg, dsnParam string, install func(*env)) {
	const docs = 60
	e := newEnv(t, docs)
	install(e)
	if dsnParam != "" {
		e.dsns[db] = withDSNParam(db, e.dsns[db], dsnParam)
	}
	addr := freeAddr(t)
	sc := start(t, e.stuckConfig(addr, 2), addr)
	ctx := context.Background()
	coll := e.coll(db)
	badSeq, err := sc.c.Patch(ctx, coll, "1", map[string]any{"$set": map[string]any{"s": bad}})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t)(sc.c.Patch(ctx, coll, "1", map[string]any{"$inc": map[string]any{"n": 7}}))
	for id := 2; id <= docs; id++ {
		mustWrite(t)(sc.c.Patch(ctx, coll, strconv.Itoa(id), map[string]any{"$set": map[string]any{"n": id}}))
	}
	applied := func(plus int64) func() bool {
		return func() bool {
			rows := e.rows(db)
			for id := int64(2); id <= docs; id++ {
				if rows[id].N != id+plus {
					return false
				}
			}
			return true
		}
	}
	waitFor(t, 60*time.Second, "every unrelated document in the store", applied(0))
	var dls []client.DeadLetter
	waitFor(t, 60*time.Second, "a dead letter", func() bool {
		var err error
		if dls, err = sc.c.DeadLetters(ctx, 100); err != nil {
			t.Fatal(err)
		}
		return len(dls) > 0
	})
	if len(dls) != 1 {
		t.Fatalf("dead letters: %+v, want exactly the bad change", dls)
	}
	if d := dls[0]; d.Collection != coll || d.ID != "1" || d.Seq != badSeq {
		t.Errorf("dead letter %s/%s seq %d, want %s/1 seq %d", d.Collection, d.ID, d.Seq, coll, badSeq)
	}
	if d := dls[0]; !strings.Contains(d.Error, code) || !strings.Contains(d.Error, msg) {
		t.Errorf("dead letter error %q does not carry the store's error (%s, %q)", d.Error, code, msg)
	}
	waitFor(t, 30*time.Second, "document 1's later change", func() bool { return e.rows(db)[1].N == 7 })
	if r := e.rows(db)[1]; r.S.String != "init" {
		t.Errorf("document 1 has s = %.40q, want the value before the dead-lettered change", r.S.String)
	}
	if v := metricValue(t, sc.addr, `writeback_deadletters_total{reason="retries"}`); v != 1 {
		t.Errorf(`writeback_deadletters_total{reason="retries"} = %v, want 1`, v)
	}
	if v := metricValue(t, sc.addr, "writeback_apply_retries_total"); v < 2 {
		t.Errorf("writeback_apply_retries_total = %v, want at least maxRetries", v)
	}

	for id := 1; id <= docs; id++ {
		mustWrite(t)(sc.c.Patch(ctx, coll, strconv.Itoa(id), map[string]any{"$inc": map[string]any{"n": 1000}}))
	}
	waitFor(t, 60*time.Second, "the second wave", func() bool { return applied(1000)() && e.rows(db)[1].N == 1007 })
	if dls, _ := sc.c.DeadLetters(ctx, 100); len(dls) != 1 {
		t.Errorf("dead letters after the second wave: %d, want 1", len(dls))
	}
	if st := sc.flush(t); st.Pending != 0 {
		t.Errorf("flush: %+v; want nothing pending", st)
	}
}
