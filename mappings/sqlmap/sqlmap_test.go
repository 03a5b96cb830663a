package sqlmap

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/writeback/writeback/mappings"
)

// fakeStore answers every query with rows and records the arguments.
type fakeStore struct {
	dialect string
	rows    []json.RawMessage
	args    []any
}

func (f *fakeStore) Dialect() string { return f.dialect }
func (f *fakeStore) QueryJSON(_ context.Context, _ string, args ...any) ([]json.RawMessage, error) {
	f.args = args
	return f.rows, nil
}

func load(t *testing.T, st *fakeStore, cfg map[string]any) (*mappings.Set, error) {
	t.Helper()
	cfg["plugin"] = "sql"
	return mappings.Default.Load(mappings.Context{
		Context: context.Background(),
		Stores:  map[string]mappings.Store{"pg": st},
		Queues:  map[string]string{"bank": "pg", "other": "maria"},
	}, []map[string]any{cfg})
}

func TestSQLMapping(t *testing.T) {
	st := &fakeStore{dialect: "postgres", rows: []json.RawMessage{json.RawMessage(`{"id":7,"balance":10}`)}}
	set, err := load(t, st, map[string]any{
		"store": "pg", "key": "account:{branch}:{id}", "queue": "bank/{branch}", "ttl": "10m",
		"query": "SELECT id, balance FROM account WHERE branch = $1 AND id = $2",
	})
	if err != nil {
		t.Fatal(err)
	}
	m, p, ok := set.Match("account:3:7")
	if !ok {
		t.Fatal("no match")
	}
	if q := m.Queue(p); q != "bank/3" {
		t.Errorf("queue %q", q)
	}
	if ttl := mappings.TTL(m); ttl.Minutes() != 10 {
		t.Errorf("ttl %v", ttl)
	}
	if st := mappings.Staleness(m); st != 0 {
		t.Errorf("staleness %v without the setting; want 0 (reads never lag)", st)
	}
	v, err := m.Load(context.Background(), p)
	if err != nil || string(v) != `{"id":7,"balance":10}` {
		t.Fatalf("Load = %s %v", v, err)
	}
	if len(st.args) != 2 || st.args[0] != "3" || st.args[1] != "7" {
		t.Errorf("args %v: the key's placeholders bind in order", st.args)
	}
	st.rows = nil
	if v, err := m.Load(context.Background(), p); v != nil || err != nil {
		t.Errorf("no row: %s %v, want nil, nil (404)", v, err)
	}
	st.rows = []json.RawMessage{json.RawMessage(`{}`), json.RawMessage(`{}`)}
	if _, err := m.Load(context.Background(), p); err == nil || !strings.Contains(err.Error(), "many: true") {
		t.Errorf("two rows: %v", err)
	}
}

func TestSQLMappingMany(t *testing.T) {
	st := &fakeStore{dialect: "mysql", rows: []json.RawMessage{json.RawMessage(`{"a":1}`), json.RawMessage(`{"a":2}`)}}
	set, err := load(t, st, map[string]any{"store": "pg", "key": "orders:{c}", "many": true, "query": "SELECT a FROM o WHERE c = ?"})
	if err != nil {
		t.Fatal(err)
	}
	m, p, _ := set.Match("orders:x")
	if m.Queue(p) != "" {
		t.Error("a mapping without queue named one")
	}
	v, _ := m.Load(context.Background(), p)
	if string(v) != `[{"a":1},{"a":2}]` {
		t.Errorf("Load = %s", v)
	}
	st.rows = nil
	if v, _ := m.Load(context.Background(), p); string(v) != `[]` {
		t.Errorf("no rows = %s, want []", v)
	}
}

func TestSQLMappingConfigErrors(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{"store": "pg", "key": "a:{id}", "query": "SELECT 1 FROM t WHERE id = $1"}
	}
	cases := []struct {
		name string
		edit func(map[string]any)
		msg  string
	}{
		{"no key", func(c map[string]any) { delete(c, "key") }, "key: no key pattern"},
		{"unknown store", func(c map[string]any) { c["store"] = "nope" }, `store: "nope" is not a configured SQL store`},
		{"placeholders", func(c map[string]any) { c["query"] = "SELECT 1 FROM t WHERE id = $1 AND x = $2" }, "2 parameters and the key"},
		{"not a select", func(c map[string]any) { c["query"] = "DELETE FROM t WHERE id = $1" }, "must be a SELECT"},
		{"queue placeholder", func(c map[string]any) { c["queue"] = "bank/{branch}" }, "{branch} is not a placeholder"},
		{"queue family", func(c map[string]any) { c["queue"] = "nope/{id}" }, `"nope" is not a configured queue family`},
		{"queue store", func(c map[string]any) { c["queue"] = "other/{id}" }, "apply to store maria, but this mapping reads store pg"},
		{"typo", func(c map[string]any) { c["querry"] = "x" }, "querry is not a known key"},
		{"negative staleness", func(c map[string]any) { c["staleness"] = "-1s" }, "staleness: -1s is negative"},
		{"staleness below 2ms", func(c map[string]any) { c["staleness"] = "1ms" }, "staleness: 1ms is below the 2ms"},
		{"immutable and stale", func(c map[string]any) { c["staleness"] = "1s"; c["immutable"] = true }, "immutable entries never lag"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.edit(c)
			_, err := load(t, &fakeStore{dialect: "postgres"}, c)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %v, want %q", err, tc.msg)
			}
		})
	}
}
