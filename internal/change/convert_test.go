package change

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// seqPatch is patch with sequence number seq.
func seqPatch(t *testing.T, s *Schema, seq int64, body string) Change {
	t.Helper()
	c := patch(t, s, body)
	c.Seq = seq
	return c
}

func TestConvertPure(t *testing.T) {
	s := docSchema(t)
	doc := Doc{"_id": json.RawMessage(`"a"`), "n": json.RawMessage(`1`), "tags": json.RawMessage(`["x"]`)}
	in := []Change{
		seqPatch(t, s, 5, `{"$inc":{"n":2}}`),
		seqPatch(t, s, 6, `{"$addToSet":{"tags":"y"}}`),
		seqPatch(t, s, 7, `{"$pull":{"tags":"y"}}`),
		seqPatch(t, s, 8, `{"$push":{"log":1}}`),
	}
	out, err := Convert(doc, in)
	require.NoError(t, err)
	require.Less(t, len(out), len(in), "compacted")
	for _, c := range out {
		require.True(t, IsIdempotent(c), "%+v", c)
	}
	require.True(t, AllIdempotent(out))
	require.False(t, AllIdempotent(in), "$inc, $pull and $push are not idempotent")
	require.Equal(t, int64(8), out[len(out)-1].Seq, "the last seq survives")
	want, err := ApplyAll(doc, in)
	require.NoError(t, err)
	got, err := ApplyAll(doc, out)
	require.NoError(t, err)
	require.Equal(t, want, got)
	again, err := ApplyAll(got, out)
	require.NoError(t, err)
	require.Equal(t, want, again, "a replay of the converted changes is harmless")

	// A patch of a missing document does nothing.
	out, err = Convert(nil, []Change{seqPatch(t, s, 9, `{"$inc":{"n":1}}`)})
	require.NoError(t, err)
	require.Equal(t, []Change{{Seq: 9, Kind: Patch}}, out)

	// A change that cannot apply is a type error.
	_, err = Convert(doc, []Change{seqPatch(t, s, 10, `{"$push":{"n":1}}`)})
	var te *TypeError
	require.True(t, errors.As(err, &te), "%v", err)
}
