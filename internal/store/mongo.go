package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeback/writeback/internal/change"
)

// mongoStore is a MongoDB database (or a server speaking its wire protocol,
// such as FerretDB), through the official Go driver.
//
// A collection's documents are keyed by a string _id. MongoDB has no
// transaction that could cover a document and a separate applied record
// (FerretDB has no multi-document transactions at all), so exactly-once
// works differently from the SQL stores:
//
//   - Each document carries the seq of the last change applied to it in a
//     field of its own, StampField, written by the same single-document
//     operation that applies the change (MongoDB makes each such operation
//     atomic). Readers get it with the document, as the SQL stores' Read
//     returns the applied record, and subtract it from the buffered write.
//   - The applier converts non-idempotent changes into idempotent ones from
//     the stored document before applying them, and persists the
//     conversion in the buffered write first (the paper's Algorithm 2; see
//     Converter and package bgt). Replaying a converted prefix after a
//     crash is harmless.
//   - Every operation is also conditional on the stamp being below the
//     change's seq, so that a replay — or an applier that lost its
//     partition and does not know it yet — never moves a document back.
type mongoStore struct {
	client *mongo.Client
	db     *mongo.Database

	mu    sync.Mutex
	colls map[string]bool // collections Describe saw: AppliedMax reads their stamps
}

var (
	_ Store     = (*mongoStore)(nil)
	_ Converter = (*mongoStore)(nil)
)

// StampField is the field of a MongoDB document that holds the seq of the
// last change applied to it. Clients can neither write nor change it, and
// reads leave it out.
const StampField = "_wbseq"

// mongoKey is the key field of every MongoDB collection.
const mongoKey = "_id"

func openMongo(ctx context.Context, uri string, o Options) (Store, error) {
	if o.Database == "" {
		return nil, errors.New("store: mongodb: no database given")
	}
	opts := options.Client().ApplyURI(uri).SetAppName("writeback")
	if !strings.Contains(uri, "maxPoolSize") { // the URI's own setting wins
		opts.SetMaxPoolSize(uint64(o.MaxConns))
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		return nil, fmt.Errorf("store: mongodb: %w", err)
	}
	s := &mongoStore{client: client, db: client.Database(o.Database), colls: map[string]bool{}}
	if err := s.Ping(ctx); err != nil {
		_ = client.Disconnect(context.Background())
		return nil, err
	}
	return s, nil
}

// Describe checks the key (always _id) and returns a collection's dynamic
// schema, with StampField reserved.
func (s *mongoStore) Describe(ctx context.Context, table, key string) (*Table, error) {
	if key != mongoKey {
		return nil, fmt.Errorf("store: mongodb collection %s: the key must be %s, not %q", table, mongoKey, key)
	}
	schema, err := change.NewDynamicSchema(mongoKey)
	if err != nil {
		return nil, err
	}
	schema.Reserve(StampField)
	// Reach the collection once, so that a bad name or missing rights show
	// at start and not at the first write.
	if err := s.db.Collection(table).FindOne(ctx, bson.D{{Key: mongoKey, Value: ""}}).Err(); err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return nil, classifyMongo(err)
	}
	s.mu.Lock()
	s.colls[table] = true
	s.mu.Unlock()
	return &Table{Name: table, Schema: schema}, nil
}

// Read returns a document and its stamp, read in one operation.
func (s *mongoStore) Read(ctx context.Context, t *Table, collection, id string, _ int) (change.Doc, int64, error) {
	raw, err := s.db.Collection(t.Name).FindOne(ctx, bson.D{{Key: mongoKey, Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, classifyMongo(err)
	}
	return FromBSON(raw)
}

// ReadMany returns the documents of ids and their stamps, in one query.
func (s *mongoStore) ReadMany(ctx context.Context, t *Table, ids []string) (map[string]Stored, error) {
	cur, err := s.db.Collection(t.Name).Find(ctx, bson.D{{Key: mongoKey, Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return nil, classifyMongo(err)
	}
	defer cur.Close(ctx)
	out := make(map[string]Stored, len(ids))
	for cur.Next(ctx) {
		doc, stamp, err := FromBSON(cur.Current)
		if err != nil {
			return nil, err
		}
		id, ok := cur.Current.Lookup(mongoKey).StringValueOK()
		if !ok {
			continue
		}
		out[id] = Stored{Doc: doc, Seq: stamp}
	}
	if err := cur.Err(); err != nil {
		return nil, classifyMongo(err)
	}
	return out, nil
}

// Scan returns up to limit documents with _id >= from in _id order. Only
// string ids qualify (MongoDB compares values of one type only), which are
// the only ids the cache hands out.
func (s *mongoStore) Scan(ctx context.Context, t *Table, from string, limit int) ([]change.Doc, error) {
	opts := options.Find().SetSort(bson.D{{Key: mongoKey, Value: 1}}).SetLimit(int64(limit))
	cur, err := s.db.Collection(t.Name).Find(ctx, bson.D{{Key: mongoKey, Value: bson.D{{Key: "$gte", Value: from}}}}, opts)
	if err != nil {
		return nil, classifyMongo(err)
	}
	defer cur.Close(ctx)
	var out []change.Doc
	for cur.Next(ctx) {
		doc, _, err := FromBSON(cur.Current)
		if err != nil {
			return nil, err
		}
		out = append(out, doc)
	}
	if err := cur.Err(); err != nil {
		return nil, classifyMongo(err)
	}
	return out, nil
}

// notApplied matches the document id unless a change with seq or later
// was applied to it already.
func notApplied(id string, seq int64) bson.D {
	return bson.D{
		{Key: mongoKey, Value: id},
		{Key: StampField, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gte", Value: seq}}}}},
	}
}

// Apply applies each write's changes in order, each change as one atomic
// single-document operation that also stamps the document with the
// change's seq, and all of one collection's operations in ordered bulk
// writes (one round trip in the common case). It is not a transaction: on
// an error some changes may have been applied, which a replay of the same
// writes skips (their stamps) or repeats harmlessly (converted changes).
//
// A change the server cannot apply as one update document (its operators
// overlap, as compaction can make them) is applied as a replacement of the
// whole document computed here, conditional on the stamp read with it.
func (s *mongoStore) Apply(ctx context.Context, writes []Write) ([]Result, error) {
	results := make([]Result, len(writes))
	byColl := map[string][]int{}
	var names []string
	for i, w := range writes {
		if _, ok := byColl[w.Table.Name]; !ok {
			names = append(names, w.Table.Name)
		}
		byColl[w.Table.Name] = append(byColl[w.Table.Name], i)
		results[i].LastSeq = w.Changes[len(w.Changes)-1].Seq
	}
	sort.Strings(names)
	for _, name := range names {
		if err := s.applyColl(ctx, s.db.Collection(name), writes, byColl[name], results); err != nil {
			return nil, err
		}
	}
	return results, nil
}

// op is one operation of a bulk write and the change it applies.
type op struct {
	model mongo.WriteModel
	w     int // index of its write
	put   bool
	seq   int64
}

func (s *mongoStore) applyColl(ctx context.Context, coll *mongo.Collection, writes []Write, idx []int, results []Result) error {
	var ops []op
	flush := func() error {
		err := s.bulk(ctx, coll, writes, ops)
		ops = ops[:0]
		return err
	}
	for _, i := range idx {
		w := writes[i]
		for _, c := range w.Changes {
			results[i].Applied++
			switch c.Kind {
			case change.Put:
				doc, err := docToBSON(c.Doc, c.Seq)
				if err != nil {
					return &Error{Permanent: true, Err: err}
				}
				m := mongo.NewReplaceOneModel().SetFilter(notApplied(w.ID, c.Seq)).SetReplacement(doc).SetUpsert(true)
				ops = append(ops, op{model: m, w: i, put: true, seq: c.Seq})
			case change.Delete:
				ops = append(ops, op{model: mongo.NewDeleteOneModel().SetFilter(notApplied(w.ID, c.Seq)), w: i, seq: c.Seq})
			case change.Patch:
				if len(c.Set) > 0 || len(c.Unset) > 0 || len(c.Inc) > 0 || len(c.JSON) > 0 {
					return &Error{Permanent: true, Err: errors.New("store: mongodb: a patch of table columns reached a document collection")}
				}
				ups := change.Updates(c.Ops)
				if len(ups) > 1 {
					if err := flush(); err != nil {
						return err
					}
					missing, err := s.replaceWith(ctx, coll, w, c)
					if err != nil {
						return err
					}
					results[i].Missing = results[i].Missing || missing
					continue
				}
				var u bson.Raw
				var err error
				if len(ups) == 0 {
					u, err = stampUpdate(nil, c.Seq)
				} else {
					u, err = stampUpdate(ups[0], c.Seq)
				}
				if err != nil {
					return &Error{Permanent: true, Err: err}
				}
				ops = append(ops, op{model: mongo.NewUpdateOneModel().SetFilter(notApplied(w.ID, c.Seq)).SetUpdate(u), w: i, seq: c.Seq})
			}
		}
	}
	return flush()
}

// bulk runs ops as ordered bulk writes. A Put whose upsert collides with
// the document's _id found the document already stamped at or past its
// seq (the filter did not match an existing document): it was applied
// before, and the rest goes on after it.
func (s *mongoStore) bulk(ctx context.Context, coll *mongo.Collection, writes []Write, ops []op) error {
	for len(ops) > 0 {
		models := make([]mongo.WriteModel, len(ops))
		for i, o := range ops {
			models[i] = o.model
		}
		_, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(true))
		if err == nil {
			return nil
		}
		var bwe mongo.BulkWriteException
		if !errors.As(err, &bwe) || len(bwe.WriteErrors) == 0 || bwe.WriteConcernError != nil {
			return classifyMongo(err)
		}
		we := bwe.WriteErrors[0]
		if we.Index < 0 || we.Index >= len(ops) {
			return classifyMongo(err)
		}
		o := ops[we.Index]
		if !o.put || !mongo.IsDuplicateKeyError(we) {
			return classifyMongo(fmt.Errorf("document %s: %w", writes[o.w].ID, err))
		}
		applied, err := s.stampedAtLeast(ctx, coll, writes[o.w].ID, o.seq)
		if err != nil {
			return err
		}
		if !applied {
			// A unique index of the collection's own refused the document.
			return &Error{Permanent: true, Err: fmt.Errorf("document %s: %s", writes[o.w].ID, we.Message)}
		}
		ops = ops[we.Index+1:]
	}
	return nil
}

// stampedAtLeast reports whether the document is stamped with seq or
// later.
func (s *mongoStore) stampedAtLeast(ctx context.Context, coll *mongo.Collection, id string, seq int64) (bool, error) {
	raw, err := coll.FindOne(ctx, bson.D{{Key: mongoKey, Value: id}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	if err != nil {
		return false, classifyMongo(err)
	}
	stamp, _ := raw.Lookup(StampField).AsInt64OK()
	return stamp >= seq, nil
}

// replaceWith applies a patch as a whole-document replacement computed
// from the stored document, conditional on the stamp it was read with (a
// compare-and-swap, retried if the document moved meanwhile). It reports
// whether the document was missing (the patch then does nothing).
func (s *mongoStore) replaceWith(ctx context.Context, coll *mongo.Collection, w Write, c change.Change) (bool, error) {
	for attempt := 0; attempt < 8; attempt++ {
		raw, err := coll.FindOne(ctx, bson.D{{Key: mongoKey, Value: w.ID}}).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			return true, nil
		}
		if err != nil {
			return false, classifyMongo(err)
		}
		doc, stamp, err := FromBSON(raw)
		if err != nil {
			return false, &Error{Permanent: true, Err: err}
		}
		if stamp >= c.Seq {
			return false, nil // applied before
		}
		next, err := change.Apply(doc, c)
		if err != nil {
			return false, &Error{Permanent: true, Err: fmt.Errorf("document %s: %w", w.ID, err)}
		}
		nb, err := docToBSON(next, c.Seq)
		if err != nil {
			return false, &Error{Permanent: true, Err: err}
		}
		filter := bson.D{{Key: mongoKey, Value: w.ID}}
		if _, has := raw.Lookup(StampField).AsInt64OK(); has {
			filter = append(filter, bson.E{Key: StampField, Value: stamp})
		} else {
			filter = append(filter, bson.E{Key: StampField, Value: bson.D{{Key: "$exists", Value: false}}})
		}
		res, err := coll.ReplaceOne(ctx, filter, nb)
		if err != nil {
			return false, classifyMongo(err)
		}
		if res.MatchedCount == 1 {
			return false, nil
		}
	}
	return false, fmt.Errorf("store: mongodb: document %s keeps changing under the applier", w.ID)
}

// AppliedMax returns the highest stamp of the described collections, under
// AnyPartition: stamps do not record partitions. The stamps live in the
// described collections' own documents, so they are this deployment's
// whatever the collections named.
func (s *mongoStore) AppliedMax(ctx context.Context, _ []string) (map[int]int64, error) {
	s.mu.Lock()
	names := make([]string, 0, len(s.colls))
	for n := range s.colls {
		names = append(names, n)
	}
	s.mu.Unlock()
	var top int64
	for _, n := range names {
		opts := options.FindOne().SetSort(bson.D{{Key: StampField, Value: -1}}).SetProjection(bson.D{{Key: StampField, Value: 1}})
		raw, err := s.db.Collection(n).FindOne(ctx, bson.D{{Key: StampField, Value: bson.D{{Key: "$exists", Value: true}}}}, opts).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue
		}
		if err != nil {
			return nil, classifyMongo(err)
		}
		if v, ok := raw.Lookup(StampField).AsInt64OK(); ok {
			top = max(top, v)
		}
	}
	return map[int]int64{AnyPartition: top}, nil
}

// CompactApplied has nothing to do: the stamps live in the documents.
func (s *mongoStore) CompactApplied(context.Context, []AppliedRecord) (int, error) { return 0, nil }

// ListApplied returns nothing: there is no applied-records table.
func (s *mongoStore) ListApplied(context.Context, string, string, int) ([]AppliedRecord, error) {
	return nil, nil
}

// Ping checks that the server answers.
func (s *mongoStore) Ping(ctx context.Context) error {
	if err := s.db.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err(); err != nil {
		return classifyMongo(err)
	}
	return nil
}

// Close disconnects.
func (s *mongoStore) Close() error { return s.client.Disconnect(context.Background()) }

// transientCodes are server error codes that say nothing about the data:
// the server is stepping down, shutting down, unreachable, overloaded or
// refusing us; retrying later can succeed.
var transientCodes = map[int]bool{
	6: true, 7: true, 13: true, 18: true, 50: true, 64: true, 89: true, 91: true, 112: true,
	117: true, 189: true, 202: true, 262: true, 9001: true, 10107: true, 11600: true,
	11602: true, 13435: true, 13436: true,
}

// classifyMongo wraps a driver error as a store Error: a write error (the
// server refused this document's change: type mismatch, bad path,
// document too large, a unique index) is permanent; network errors,
// timeouts, and server states are transient.
func classifyMongo(err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return err
	}
	var ne net.Error
	if mongo.IsNetworkError(err) || mongo.IsTimeout(err) || errors.As(err, &ne) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return &Error{Err: fmt.Errorf("mongodb: %w", err)}
	}
	var srv mongo.ServerError
	if errors.As(err, &srv) {
		for code := range transientCodes {
			if srv.HasErrorCode(code) {
				return &Error{Err: fmt.Errorf("mongodb: %w", err)}
			}
		}
		var bwe mongo.BulkWriteException
		var we mongo.WriteException
		if errors.As(err, &bwe) && len(bwe.WriteErrors) > 0 || errors.As(err, &we) && len(we.WriteErrors) > 0 {
			return &Error{Permanent: true, Err: fmt.Errorf("mongodb: %w", err)}
		}
	}
	return &Error{Err: fmt.Errorf("mongodb: %w", err)}
}
