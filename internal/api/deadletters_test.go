package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/pkg/client"
)

// deadList reads GET /v1/deadletters.
func (w *world) deadList(t *testing.T, query string) []client.DeadLetter {
	t.Helper()
	var out struct {
		DeadLetters []client.DeadLetter `json:"deadLetters"`
	}
	w.do(t, "GET", "/v1/deadletters"+query, "").ok(t, "dead letters", &out)
	if out.DeadLetters == nil {
		t.Fatal(`the dead-letter list is null; want [] when empty`)
	}
	return out.DeadLetters
}

// deadAct posts a replay or drop and returns its count.
func (w *world) deadAct(t *testing.T, action, sel string) int {
	t.Helper()
	var out struct{ Done int }
	w.do(t, "POST", "/v1/deadletters/"+action, sel).ok(t, action+" "+sel, &out)
	return out.Done
}

// changeOf returns a dead letter's changes as buffered
// ("<seq>|<ms>|<kind>|<change JSON>"), without their seq and time.
func changeOf(t *testing.T, d client.DeadLetter) string {
	t.Helper()
	var entries []string
	if err := json.Unmarshal(d.Change, &entries); err != nil || len(entries) == 0 {
		t.Fatalf("dead letter change %s: %v; want the buffered entries", d.Change, err)
	}
	var out []string
	for _, e := range entries {
		parts := strings.SplitN(e, "|", 3)
		if len(parts) != 3 {
			t.Fatalf("dead letter change entry %q is not <seq>|<ms>|<kind>|<change>", e)
		}
		out = append(out, parts[2])
	}
	return strings.Join(out, "\n")
}

// A write-back change the store rejects becomes a dead letter at the
// flush: listed with its error and change, in status and the gauge; a
// replay buffers it again (and, the cause not fixed, it dies again under a
// new seq); a drop removes it for good.
func TestDeadLetters(t *testing.T) {
	w := newWorld(t, opts{})
	if got := w.deadList(t, ""); len(got) != 0 {
		t.Fatalf("dead letters of a new world: %+v", got)
	}
	if n := w.deadAct(t, "drop", `{"all":true}`); n != 0 {
		t.Errorf("drop of all with none: done %d", n)
	}
	doc := func(id string) string { return "/v1/docs/" + w.coll + "/" + id }
	w.do(t, "PUT", doc("1"), `{"n":500}`).ok(t, "put 1 over the CHECK", nil) // only the store can tell
	w.do(t, "PUT", doc("2"), `{"n":5}`).ok(t, "put 2", nil)
	w.do(t, "PUT", doc("3"), `{"n":600}`).ok(t, "put 3 over the CHECK", nil)
	res := w.flush(t)
	if res.Applied != 1 || res.DeadLetters != 2 || res.Pending != 0 || !res.Drained {
		t.Fatalf("flush: %+v; want 1 applied, 2 dead letters, drained", res)
	}
	dls := w.deadList(t, "")
	if len(dls) != 2 {
		t.Fatalf("dead letters: %+v; want 2", dls)
	}
	var one client.DeadLetter
	for _, d := range dls {
		if d.Collection != w.coll || (d.ID != "1" && d.ID != "3") || d.Seq <= 0 || d.At.IsZero() ||
			!strings.Contains(d.Error, "23514") || !strings.Contains(changeOf(t, d), `"n":`) {
			t.Errorf("dead letter %+v lacks its collection, id, seq, time, the store's error or the change", d)
		}
		if d.ID == "1" {
			one = d
		}
	}
	if got := w.deadList(t, "?limit=1"); len(got) != 1 {
		t.Errorf("?limit=1 listed %d dead letters", len(got))
	}
	if st := w.status(t); st.DeadLetters != 2 || len(st.DeadLetterList) != 2 {
		t.Errorf("status: %d dead letters, %d listed; want 2", st.DeadLetters, len(st.DeadLetterList))
	}
	waitFor(t, 5*time.Second, "writeback_dead_letters to be 2", func() bool {
		return w.metric(t, "writeback_dead_letters") == 2
	})

	sel := func(d client.DeadLetter, seq int64) string {
		return fmt.Sprintf(`{"collection":%q,"id":%q,"seq":%d}`, d.Collection, d.ID, seq)
	}
	bad := []struct{ name, body string }{
		{"no body", ""},
		{"empty selection", "{}"},
		{"no seq", fmt.Sprintf(`{"collection":%q,"id":"1"}`, w.coll)},
		{"unknown field", `{"all":true,"force":true}`},
		{"not JSON", "all"},
	}
	for _, action := range []string{"replay", "drop"} {
		for _, tc := range bad {
			t.Run(action+" "+tc.name, func(t *testing.T) {
				w.do(t, "POST", "/v1/deadletters/"+action, tc.body).isError(t, tc.name, http.StatusBadRequest, client.CodeInvalidArgument,
					`select dead letters with {"collection":…,"id":…,"seq":…} or {"all":true}`)
			})
		}
		w.do(t, "POST", "/v1/deadletters/"+action, sel(one, one.Seq+1000)).isError(t, action+" of no such dead letter",
			http.StatusNotFound, client.CodeNotFound, "no such dead letter")
	}

	if n := w.deadAct(t, "replay", sel(one, one.Seq)); n != 1 {
		t.Fatalf("replay of one dead letter: done %d", n)
	}
	if st := w.status(t); st.DeadLetters != 1 || st.Pending != 1 {
		t.Errorf("after the replay: %d dead letters, %d pending; want 1 and the change buffered again", st.DeadLetters, st.Pending)
	}
	w.flush(t) // the CHECK still rejects it
	var again client.DeadLetter
	for _, d := range w.deadList(t, "") {
		if d.ID == "1" {
			again = d
		}
	}
	if again.Seq <= one.Seq || changeOf(t, again) != changeOf(t, one) {
		t.Fatalf("the replayed change died again as %+v; want the same change under a new seq (was %d)", again, one.Seq)
	}

	if n := w.deadAct(t, "drop", `{"all":true}`); n != 2 {
		t.Errorf("drop of all: done %d; want 2", n)
	}
	if got := w.deadList(t, ""); len(got) != 0 {
		t.Errorf("dead letters after dropping all: %+v", got)
	}
	if st := w.status(t); st.DeadLetters != 0 || st.Pending != 0 {
		t.Errorf("after the drop: %d dead letters, %d pending", st.DeadLetters, st.Pending)
	}
	w.do(t, "GET", doc("1"), "").isError(t, "read of a dropped document", http.StatusNotFound, client.CodeNotFound, "document not found")
	var n int64
	if err := w.pg.QueryRow(fmt.Sprintf("SELECT n FROM %s WHERE id = 2", w.coll)).Scan(&n); err != nil || n != 5 {
		t.Errorf("the valid change: n = %d (%v); want 5", n, err)
	}
}
