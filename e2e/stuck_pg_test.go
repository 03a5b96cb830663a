package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
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
	stuckChange{
		dbs: []string{"pg"}, docs: 60, bad: hex.EncodeToString(big),
		code: map[string]string{"pg": "54000"}, msg: "exceeds btree",
		install: func(e *env) {
			e.exec(e.dbs["pg"], fmt.Sprintf("CREATE INDEX %s_s ON %s (s)", e.table, e.table))
		},
	}.run(t)
}

// A change whose statement runs out of its time (statement_timeout,
// SQLSTATE 57014: a trigger sleeps on one value) is isolable: after
// maxRetries failed rounds it is dead-lettered alone, and every other
// change batched with it reaches the store. The timeout is a run-time
// parameter of this sidecar's DSN only (as an operator would set it, and
// as ALTER ROLE … SET would for every session of the role): other tests
// share the role and the database.
func TestStuckStatementTimeout(t *testing.T) { stuckSlowChange(t, "pg") }
