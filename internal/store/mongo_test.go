package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/testenv"
)

// mongoHarness opens the test MongoDB-wire server on a database of its own
// and describes one collection.
func mongoHarness(t *testing.T) (*mongoStore, *Table) {
	t.Helper()
	uri := testenv.MongoURI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dbName := testenv.UniqueName(t, "wb_store")
	st, err := OpenWith(ctx, "mongodb", uri, Options{Database: dbName})
	require.NoError(t, err)
	s := st.(*mongoStore)
	t.Cleanup(func() {
		_ = s.db.Drop(context.Background())
		_ = s.Close()
	})
	tbl, err := s.Describe(ctx, "docs", "_id")
	require.NoError(t, err)
	return s, tbl
}

func mpatch(t *testing.T, tbl *Table, seq int64, body string) change.Change {
	t.Helper()
	c, err := change.ParsePatch(tbl.Schema, []byte(body))
	require.NoError(t, err)
	c.Seq = seq
	return c
}

func mput(t *testing.T, tbl *Table, id string, seq int64, body string) change.Change {
	t.Helper()
	c, err := change.ParsePut(tbl.Schema, id, []byte(body))
	require.NoError(t, err)
	c.Seq = seq
	return c
}

func docJSON(t *testing.T, d change.Doc) string {
	t.Helper()
	b, err := json.Marshal(d)
	require.NoError(t, err)
	return string(b)
}

func TestMongoApplyReadAndStamps(t *testing.T) {
	s, tbl := mongoHarness(t)
	ctx := t.Context()
	w := func(id string, cs ...change.Change) Write {
		return Write{Collection: "docs", Table: tbl, ID: id, Changes: cs}
	}
	_, err := s.Apply(ctx, []Write{
		w("a", mput(t, tbl, "a", 1, `{"n":1,"tags":["x"],"f":1.5,"o":{"b":1,"a":2}}`),
			mpatch(t, tbl, 2, `{"$inc":{"n":2},"$push":{"tags":"y"}}`)),
		w("b", mput(t, tbl, "b", 3, `{"n":10}`)),
	})
	require.NoError(t, err)
	doc, seq, err := s.Read(ctx, tbl, "docs", "a", 0)
	require.NoError(t, err)
	require.Equal(t, int64(2), seq)
	require.JSONEq(t, `{"_id":"a","n":3,"tags":["x","y"],"f":1.5,"o":{"b":1,"a":2}}`, docJSON(t, doc))
	require.Equal(t, "1.5", string(doc["f"]))
	require.NotContains(t, doc, StampField)

	// A replay of the same writes (a crash before the trim) changes
	// nothing: every change is stamped already.
	_, err = s.Apply(ctx, []Write{
		w("a", mput(t, tbl, "a", 1, `{"n":1,"tags":["x"],"f":1.5,"o":{"b":1,"a":2}}`),
			mpatch(t, tbl, 2, `{"$inc":{"n":2},"$push":{"tags":"y"}}`)),
	})
	require.NoError(t, err)
	doc, seq, err = s.Read(ctx, tbl, "docs", "a", 0)
	require.NoError(t, err)
	require.Equal(t, int64(2), seq)
	require.JSONEq(t, `{"_id":"a","n":3,"tags":["x","y"],"f":1.5,"o":{"b":1,"a":2}}`, docJSON(t, doc))

	many, err := s.ReadMany(ctx, tbl, []string{"a", "b", "zz"})
	require.NoError(t, err)
	require.Len(t, many, 2)
	require.Equal(t, int64(3), many["b"].Seq)

	// Delete, then a patch of the missing document does nothing.
	res, err := s.Apply(ctx, []Write{w("b", change.Change{Seq: 4, Kind: change.Delete}, mpatch(t, tbl, 5, `{"$set":{"n":1}}`))})
	require.NoError(t, err)
	require.Equal(t, int64(5), res[0].LastSeq)
	doc, _, err = s.Read(ctx, tbl, "docs", "b", 0)
	require.NoError(t, err)
	require.Nil(t, doc)

	docs, err := s.Scan(ctx, tbl, "", 10)
	require.NoError(t, err)
	require.Len(t, docs, 1)
	require.Equal(t, `"a"`, string(docs[0]["_id"]))

	top, err := s.AppliedMax(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, int64(2), top[AnyPartition])
}

// A stale replay must not move a document back: a Put older than the
// stamp collides on _id and is skipped, the rest of the batch goes on.
func TestMongoOldPutIsSkipped(t *testing.T) {
	s, tbl := mongoHarness(t)
	ctx := t.Context()
	_, err := s.Apply(ctx, []Write{{Collection: "docs", Table: tbl, ID: "a", Changes: []change.Change{mput(t, tbl, "a", 7, `{"v":"new"}`)}}})
	require.NoError(t, err)
	_, err = s.Apply(ctx, []Write{
		{Collection: "docs", Table: tbl, ID: "a", Changes: []change.Change{mput(t, tbl, "a", 3, `{"v":"old"}`), mpatch(t, tbl, 4, `{"$set":{"w":1}}`)}},
		{Collection: "docs", Table: tbl, ID: "c", Changes: []change.Change{mput(t, tbl, "c", 8, `{"v":"c"}`)}},
	})
	require.NoError(t, err)
	doc, seq, err := s.Read(ctx, tbl, "docs", "a", 0)
	require.NoError(t, err)
	require.Equal(t, int64(7), seq)
	require.JSONEq(t, `{"_id":"a","v":"new"}`, docJSON(t, doc))
	doc, _, err = s.Read(ctx, tbl, "docs", "c", 0)
	require.NoError(t, err)
	require.JSONEq(t, `{"_id":"c","v":"c"}`, docJSON(t, doc))
}

// Compaction can make one change hold overlapping operators, which no
// single update document can carry: it is applied as a replacement.
func TestMongoOverlappingOperators(t *testing.T) {
	s, tbl := mongoHarness(t)
	ctx := t.Context()
	cs := change.CompactDoc([]change.Change{
		mput(t, tbl, "a", 1, `{"o":{"x":1}}`),
	})
	_, err := s.Apply(ctx, []Write{{Collection: "docs", Table: tbl, ID: "a", Changes: cs}})
	require.NoError(t, err)
	merged := change.CompactDoc([]change.Change{
		mpatch(t, tbl, 2, `{"$push":{"arr":1}}`),
		mpatch(t, tbl, 3, `{"$set":{"arr.0":5}}`),
		mpatch(t, tbl, 4, `{"$inc":{"o.x":1}}`),
		mpatch(t, tbl, 5, `{"$unset":{"o":""}}`),
	})
	require.Len(t, merged, 1)
	require.Greater(t, len(change.Updates(merged[0].Ops)), 1, "the test needs a change that spans several update documents")
	_, err = s.Apply(ctx, []Write{{Collection: "docs", Table: tbl, ID: "a", Changes: merged}})
	require.NoError(t, err)
	doc, seq, err := s.Read(ctx, tbl, "docs", "a", 0)
	require.NoError(t, err)
	require.Equal(t, int64(5), seq)
	require.JSONEq(t, `{"_id":"a","arr":[5]}`, docJSON(t, doc))
}

// A value the server refuses is a permanent error (a dead letter); the
// server being gone is not.
func TestMongoErrorsClassified(t *testing.T) {
	s, tbl := mongoHarness(t)
	ctx := t.Context()
	_, err := s.Apply(ctx, []Write{{Collection: "docs", Table: tbl, ID: "a", Changes: []change.Change{mput(t, tbl, "a", 1, `{"s":"text"}`)}}})
	require.NoError(t, err)
	_, err = s.Apply(ctx, []Write{{Collection: "docs", Table: tbl, ID: "a", Changes: []change.Change{mpatch(t, tbl, 2, `{"$inc":{"s":1}}`)}}})
	require.Error(t, err)
	require.True(t, IsPermanent(err), "%v", err)

	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err = s.Read(gone, tbl, "docs", "a", 0)
	require.Error(t, err)
	require.False(t, IsPermanent(err), "%v", err)
}

// Types JSON has no literal for survive a round trip through the cache:
// read as Extended JSON, written back as the same BSON values.
func TestMongoForeignTypesRoundTrip(t *testing.T) {
	s, tbl := mongoHarness(t)
	ctx := t.Context()
	oid := bson.NewObjectID()
	when := bson.DateTime(1700000000000)
	_, err := s.db.Collection("docs").InsertOne(ctx, bson.D{{Key: "_id", Value: "f"}, {Key: "ref", Value: oid}, {Key: "at", Value: when}, {Key: "n", Value: int64(5)}})
	require.NoError(t, err)
	doc, seq, err := s.Read(ctx, tbl, "docs", "f", 0)
	require.NoError(t, err)
	require.Zero(t, seq)
	require.JSONEq(t, `{"$oid":"`+oid.Hex()+`"}`, string(doc["ref"]))

	// A converted change sets whole fields from the read document.
	c := change.Change{Seq: 9, Kind: change.Patch, Ops: []change.Op{{Op: change.OpSet, Path: "ref2", Value: doc["ref"]}, {Op: change.OpInc, Path: "n", Value: json.RawMessage("1")}}}
	_, err = s.Apply(ctx, []Write{{Collection: "docs", Table: tbl, ID: "f", Changes: []change.Change{c}}})
	require.NoError(t, err)
	var got struct {
		Ref  bson.ObjectID `bson:"ref"`
		Ref2 bson.ObjectID `bson:"ref2"`
		At   bson.DateTime `bson:"at"`
		N    int64         `bson:"n"`
	}
	require.NoError(t, s.db.Collection("docs").FindOne(ctx, bson.D{{Key: "_id", Value: "f"}}).Decode(&got))
	require.Equal(t, oid, got.Ref)
	require.Equal(t, oid, got.Ref2)
	require.Equal(t, when, got.At)
	require.Equal(t, int64(6), got.N)
}

func TestMongoDescribe(t *testing.T) {
	s, tbl := mongoHarness(t)
	_, err := s.Describe(t.Context(), "docs", "id")
	require.ErrorContains(t, err, "the key must be _id")
	_, err = change.ParsePut(tbl.Schema, "x", []byte(`{"`+StampField+`":1}`))
	require.ErrorContains(t, err, "reserved")
	_, err = change.ParsePatch(tbl.Schema, []byte(`{"$inc":{"`+StampField+`":1}}`))
	require.ErrorContains(t, err, "reserved")
}
