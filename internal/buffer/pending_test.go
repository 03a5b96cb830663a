package buffer

import (
	"context"
	"slices"
	"testing"
	"time"
)

// PendingDocs and PendingCounts with an age see only the documents whose
// oldest buffered write is at least that old by Redis's clock, the
// longest pending first; a later write to such a document does not make
// it younger, and a trim that leaves changes re-ages it by its new oldest.
// The first aged call on a server without the script loads it.
func TestPendingAged(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	put := func(id string) int64 { return bufferPut(t, b, s, id) }
	all := []int{0, 1, 2, 3}
	aged := func(age time.Duration) []string {
		t.Helper()
		lists, err := b.PendingDocs(ctx, all, 100, age)
		if err != nil {
			t.Fatal(err)
		}
		counts, err := b.PendingCounts(ctx, all, age)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for i, l := range lists {
			if int64(len(l)) != counts[i] {
				t.Fatalf("partition %d: %d documents listed, %d counted, age %s", all[i], len(l), counts[i], age)
			}
			out = append(out, l...)
		}
		slices.Sort(out)
		return out
	}
	if err := b.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	first := put("1")
	put("2")
	if got := aged(time.Hour); len(got) != 0 {
		t.Fatalf("pending for an hour: %v; want none", got)
	}
	time.Sleep(300 * time.Millisecond)
	put("3")
	put("1") // pending since its first write still
	if got, want := aged(200*time.Millisecond), []string{"c:1", "c:2"}; !slices.Equal(got, want) {
		t.Fatalf("pending for 200ms: %v; want %v", got, want)
	}
	if got, want := aged(0), []string{"c:1", "c:2", "c:3"}; !slices.Equal(got, want) {
		t.Fatalf("pending: %v; want %v", got, want)
	}
	// Applied up to its first write, document 1 is pending since its
	// second, which is younger.
	if _, err := b.Trim(ctx, []Applied{{DocRef: b.Ref("c", "1"), LastSeq: first}}); err != nil {
		t.Fatal(err)
	}
	if got, want := aged(200*time.Millisecond), []string{"c:2"}; !slices.Equal(got, want) {
		t.Fatalf("pending for 200ms after a trim: %v; want %v", got, want)
	}
}
