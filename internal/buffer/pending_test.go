package buffer

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

// PendingCuts reads each partition as a cut: every buffered change of the
// partition at or below the bound belongs to a member, however many
// documents share a score, whatever the limit leaves out, after a trim
// re-scores a document and while writes are buffered.
func TestPendingCuts(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	part := b.Partition("c", "0")
	var ids []string
	for i := 0; len(ids) < 40; i++ {
		if id := strconv.Itoa(i); b.Partition("c", id) == part {
			ids = append(ids, id)
		}
	}
	// check checks a cut against every buffered change of the partition.
	check := func(c Cut) (inCut int) {
		t.Helper()
		taken := map[string]bool{}
		for _, m := range c.Members {
			taken[m] = true
		}
		var refs []DocRef
		for _, id := range ids {
			refs = append(refs, DocRef{Part: part, Member: Member("c", id)})
		}
		changes, err := b.Changes(ctx, refs, 1000)
		require.NoError(t, err)
		for i, cs := range changes {
			for _, ch := range cs {
				if ch.Seq <= c.Bound {
					require.True(t, taken[refs[i].Member], "change %d of %s is at or below the bound %d, and its document is not in the cut's %d", ch.Seq, refs[i].Member, c.Bound, len(c.Members))
					inCut++
				}
			}
		}
		return inCut
	}
	cuts := func(limit int) Cut {
		t.Helper()
		cs, err := b.PendingCuts(ctx, []int{part}, []int{limit})
		require.NoError(t, err)
		require.Len(t, cs, 1)
		return cs[0]
	}
	for range 3 {
		for _, id := range ids {
			bufferPut(t, b, s, id) // many in one ms: ties
		}
	}
	all := cuts(100)
	require.Len(t, all.Members, len(ids))
	require.False(t, all.More)
	require.Equal(t, all.Seq, all.Bound)
	require.Equal(t, 3*len(ids), check(all))
	for _, limit := range []int{1, 7, 20, 39} {
		c := cuts(limit)
		require.True(t, c.More)
		require.Equal(t, all.Members[:limit], c.Members)
		require.Less(t, c.Bound, all.Bound)
		check(c)
	}
	// A trim re-scores the documents it leaves changes to.
	head, err := b.Changes(ctx, []DocRef{{Part: part, Member: Member("c", ids[0])}}, 1)
	require.NoError(t, err)
	_, err = b.Trim(ctx, []Applied{{DocRef: DocRef{Part: part, Member: Member("c", ids[0])}, LastSeq: head[0][0].Seq, Count: 1}})
	require.NoError(t, err)
	after := cuts(5)
	require.NotEqual(t, Member("c", ids[0]), after.Members[0])
	check(after)
	// The sequence bounds a cut: a write after the read is above it.
	seq := bufferPut(t, b, s, ids[1])
	require.Greater(t, seq, all.Bound)

	// Cuts read while writes are buffered, new documents among them.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1000; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if id := strconv.Itoa(i); b.Partition("c", id) == part {
				ids = append(ids, id)
				bufferPut(t, b, s, id)
			}
		}
	}()
	var read []Cut
	for n := range 200 {
		read = append(read, cuts(1+n%50))
	}
	close(stop)
	<-done
	for _, c := range read {
		check(c)
	}
}
