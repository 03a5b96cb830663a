package bgt

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/store"
	"github.com/writeback/writeback/internal/testenv"
)

func mustPatch(t *testing.T, s *change.Schema, seq int64, body string) change.Change {
	t.Helper()
	c, err := change.ParsePatch(s, []byte(body))
	require.NoError(t, err)
	c.Seq = seq
	return c
}

// mongoWorld is an applier over one MongoDB-wire collection with real
// Redis.
type mongoWorld struct {
	app  *Applier
	buf  *buffer.Buffer
	st   store.Store
	tbl  *store.Table
	coll *mongo.Collection // direct access to the documents
	name string
}

func newMongoWorld(t *testing.T) *mongoWorld {
	t.Helper()
	ctx := context.Background()
	uri := testenv.MongoURI(t)
	dbName := testenv.UniqueName(t, "wb_bgt")
	st, err := store.OpenWith(ctx, "mongodb", uri, store.Options{Database: dbName})
	require.NoError(t, err)
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	require.NoError(t, err)
	w := &mongoWorld{st: st, name: testenv.UniqueName(t, "c")}
	w.coll = client.Database(dbName).Collection("docs")
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	prefix := testenv.UniqueName(t, "bgt")
	t.Cleanup(func() {
		iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		rdb.Close()
		_ = client.Database(dbName).Drop(ctx)
		_ = client.Disconnect(ctx)
		st.Close()
	})
	w.tbl, err = st.Describe(ctx, "docs", "_id")
	require.NoError(t, err)
	w.buf = buffer.New(rdb, prefix, 4, time.Second)
	colls := map[string]*Collection{w.name: {Name: w.name, StoreName: "mongo", Store: st, Table: w.tbl}}
	w.app = New(Config{InstanceID: "t", Workers: 1, BatchSize: 16, OwnerLease: time.Second, PollInterval: 10 * time.Millisecond},
		w.buf, colls, metrics.New(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	require.NoError(t, w.app.Prepare(ctx))
	return w
}

func (w *mongoWorld) write(t *testing.T, id string, c change.Change) {
	t.Helper()
	o := buffer.WriteOptions{TTL: time.Minute, Token: buffer.NewToken(), Invalidate: true}
	_, out, err := w.buf.Write(context.Background(), w.name, id, c, w.tbl.Schema, o)
	require.NoError(t, err)
	if out == buffer.NeedBase { // as the write path does: the store's value, under the I lease
		o.HaveBase = true
		o.Base, _ = w.read(t, id)
		_, out, err = w.buf.Write(context.Background(), w.name, id, c, w.tbl.Schema, o)
		require.NoError(t, err)
	}
	require.Equal(t, buffer.Buffered, out)
}

func (w *mongoWorld) pending(t *testing.T, id string) []change.Change {
	t.Helper()
	cs, err := w.buf.Changes(context.Background(), []buffer.DocRef{w.buf.Ref(w.name, id)}, 1000)
	require.NoError(t, err)
	return cs[0]
}

func (w *mongoWorld) read(t *testing.T, id string) (change.Doc, int64) {
	t.Helper()
	d, seq, err := w.st.Read(context.Background(), w.tbl, w.name, id, w.buf.Partition(w.name, id))
	require.NoError(t, err)
	return d, seq
}

// Algorithm 2 end to end: the conversion is persisted in the buffered write
// (fewer, idempotent entries, exact counters) before anything is applied,
// and applying the persisted conversion again — even with the stamp gone,
// which is what makes the stamp check moot — gives the same document.
func TestConvertPersistedThenApplied(t *testing.T) {
	w := newMongoWorld(t)
	ctx := t.Context()
	s := w.tbl.Schema
	put, err := change.ParsePut(s, "a", []byte(`{"n":1,"tags":["x"],"o":{"k":1}}`))
	require.NoError(t, err)
	w.write(t, "a", put)
	ref := w.buf.Ref(w.name, "a")
	_, _, err = w.app.ApplyRound(ctx, []int{ref.Part})
	require.NoError(t, err)
	base, _ := w.read(t, "a")
	require.NotNil(t, base)
	for _, body := range []string{
		`{"$inc":{"n":2}}`, `{"$addToSet":{"tags":"y"}}`, `{"$pull":{"tags":"y"}}`,
		`{"$push":{"log":"one"}}`, `{"$inc":{"o.k":5,"n":1}}`, `{"$push":{"log":"two"}}`,
	} {
		w.write(t, "a", mustPatch(t, s, 0, body))
	}
	orig := w.pending(t, "a")
	require.Len(t, orig, 6)
	model, err := change.ApplyAll(base, orig)
	require.NoError(t, err)

	writes := []store.Write{{Collection: w.name, Table: w.tbl, ID: "a", Partition: ref.Part, Changes: orig}}
	todo, _, _, err := w.app.convert(ctx, w.st.(store.Converter), writes)
	require.NoError(t, err)

	// Persisted: the buffered write now holds the converted changes.
	conv := w.pending(t, "a")
	require.Equal(t, todo[0].Changes, conv)
	require.Less(t, len(conv), len(orig))
	require.Equal(t, orig[len(orig)-1].Seq, conv[len(conv)-1].Seq)
	for _, c := range conv {
		require.True(t, change.IsIdempotent(c), "%+v", c)
	}
	st, err := w.buf.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(len(conv)), st.PendingChanges, "exact counters after the replacement")
	// Nothing applied yet; a reader still sees the model.
	d, _ := w.read(t, "a")
	require.Equal(t, base, d)
	got, err := change.ApplyAll(base, conv)
	require.NoError(t, err)
	require.Equal(t, model, got)

	// Applied, then applied again with the stamp removed (a replay that
	// nothing else guards): still the model.
	_, err = w.st.Apply(ctx, todo)
	require.NoError(t, err)
	_, err = w.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "$unset", Value: bson.D{{Key: store.StampField, Value: ""}}}})
	require.NoError(t, err)
	_, err = w.st.Apply(ctx, todo)
	require.NoError(t, err)
	d, seq := w.read(t, "a")
	require.Equal(t, model, d)
	require.Equal(t, orig[len(orig)-1].Seq, seq)

	// The applier's round skips what the stamp covers and trims it.
	n, _, err := w.app.ApplyRound(ctx, []int{ref.Part})
	require.NoError(t, err)
	require.Zero(t, n)
	require.Empty(t, w.pending(t, "a"))
	d, _ = w.read(t, "a")
	require.Equal(t, model, d)
}

// A conversion never overwrites a buffered write whose head was trimmed
// meanwhile (another sidecar's flush, a write-through); the round fails
// and the next one reads again.
func TestConvertRefusesMovedHead(t *testing.T) {
	w := newMongoWorld(t)
	ctx := t.Context()
	s := w.tbl.Schema
	put, err := change.ParsePut(s, "a", []byte(`{"n":1}`))
	require.NoError(t, err)
	w.write(t, "a", put)
	w.write(t, "a", mustPatch(t, s, 0, `{"$inc":{"n":1}}`))
	cs := w.pending(t, "a")
	ref := w.buf.Ref(w.name, "a")
	// Someone else applies and trims the Put meanwhile.
	_, err = w.buf.Trim(ctx, []buffer.Applied{{DocRef: ref, LastSeq: cs[0].Seq}})
	require.NoError(t, err)
	ok, err := w.buf.Convert(ctx, []buffer.Conversion{{DocRef: ref, First: cs[0].Seq, Last: cs[1].Seq, Changes: []change.Change{{Seq: cs[1].Seq, Kind: change.Patch}}}})
	require.NoError(t, err)
	require.Equal(t, []bool{false}, ok)
	require.Equal(t, cs[1:], w.pending(t, "a"), "untouched")
}

// A type error only the stored document shows ($inc of a string) makes
// exactly that change a dead letter; the changes around it are applied.
func TestConvertTypeErrorDeadLetters(t *testing.T) {
	w := newMongoWorld(t)
	ctx := t.Context()
	s := w.tbl.Schema
	_, err := w.coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: "text"}, {Key: "m", Value: int32(0)}})
	require.NoError(t, err)
	w.write(t, "a", mustPatch(t, s, 0, `{"$inc":{"m":1}}`))
	w.write(t, "a", mustPatch(t, s, 0, `{"$inc":{"n":1}}`))
	w.write(t, "a", mustPatch(t, s, 0, `{"$inc":{"m":10}}`))
	ref := w.buf.Ref(w.name, "a")
	_, _, err = w.app.ApplyRound(ctx, []int{ref.Part})
	require.NoError(t, err)
	require.Empty(t, w.pending(t, "a"))
	d, _ := w.read(t, "a")
	require.Equal(t, json.RawMessage(`11`), d["m"])
	require.Equal(t, json.RawMessage(`"text"`), d["n"])
	dls, err := w.buf.DeadLetters(ctx, 10)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Contains(t, dls[0].Error, "n")
}
