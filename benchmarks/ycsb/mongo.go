package ycsb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// mongoKey is the key field of a MongoDB document: a record's _id is its
// key, as in YCSB's MongoDB binding.
const mongoKey = "_id"

// OpenMongo connects to database of the MongoDB server (or FerretDB) at
// uri. A YCSB table is a collection of documents {_id: key, field0: …, …}
// whose values are strings. The URI's options apply to every operation of
// the DB and its clients: "w=1&journal=false" makes them asynchronous
// (bench.AsyncDSN).
func OpenMongo(ctx context.Context, uri, database string) (*DB, error) {
	if database == "" {
		return nil, errors.New("ycsb: no MongoDB database given")
	}
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetAppName("writeback-ycsb"))
	if err != nil {
		return nil, fmt.Errorf("ycsb: MongoDB URI %q: %v", uri, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx, nil); err != nil {
		_ = c.Disconnect(context.Background())
		return nil, fmt.Errorf("cannot connect to MongoDB at %s (%v); start the services with `make services`", uri, err)
	}
	return &DB{driver: MongoDB, mg: c.Database(database)}, nil
}

func (d *DB) mongoHas(ctx context.Context, coll string) (bool, error) {
	names, err := d.mg.ListCollectionNames(ctx, bson.D{{Key: "name", Value: coll}})
	return len(names) > 0, err
}

// insertMongo inserts the rows in ordered batches of a few hundred
// documents (well below the 16 MiB message limit).
func (d *DB) insertMongo(ctx context.Context, src *rowSource) error {
	s := src.s
	batch := max(1, min(1000, (4<<20)/(s.Fields*s.FieldSize+64)))
	coll := d.mg.Collection(s.Table)
	docs := make([]any, 0, batch)
	for more := true; more; {
		docs = docs[:0]
		for len(docs) < batch {
			if more = src.Next(); !more {
				break
			}
			doc := make(bson.D, 0, 1+s.Fields)
			doc = append(doc, bson.E{Key: mongoKey, Value: src.vals[0]})
			for i := range s.Fields {
				doc = append(doc, bson.E{Key: FieldName(i), Value: src.vals[1+i]})
			}
			docs = append(docs, doc)
		}
		if len(docs) > 0 {
			if _, err := coll.InsertMany(ctx, docs); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *DB) readRowsMongo(ctx context.Context, s Spec, keys []string) ([]Record, error) {
	cur, err := d.mg.Collection(s.Table).Find(ctx, bson.D{{Key: mongoKey, Value: bson.D{{Key: "$in", Value: keys}}}})
	if err != nil {
		return nil, err
	}
	return mongoRecords(ctx, cur, s.Fields, len(keys))
}

// mongoRecords decodes the documents of cur (of about n) and closes it.
func mongoRecords(ctx context.Context, cur *mongo.Cursor, fields, n int) ([]Record, error) {
	defer cur.Close(ctx)
	out := make([]Record, 0, n)
	for cur.Next(ctx) {
		key, row, err := mongoRecord(cur.Current, fields)
		if err != nil {
			return nil, err
		}
		out = append(out, Record{Key: key, Row: row})
	}
	return out, cur.Err()
}

// mongoRecord decodes a document's key and fields; a missing or non-string
// field reads as "" (which the model then rules out, if it was updated).
func mongoRecord(raw bson.Raw, fields int) (string, Row, error) {
	key, ok := raw.Lookup(mongoKey).StringValueOK()
	if !ok {
		return "", nil, fmt.Errorf("a document's %s is not a string", mongoKey)
	}
	row := make(Row, fields)
	for i := range row {
		row[i], _ = raw.Lookup(FieldName(i)).StringValueOK()
	}
	return key, row, nil
}

// newMongoClient returns a client of the collection. The driver's pool is
// shared by every client of the DB; its operations are YCSB's MongoDB
// binding's: find by _id, $set of the updated fields, find {_id: {$gte}}
// sorted by _id with a limit.
func (d *DB) newMongoClient(s Spec) Client {
	names := make([]string, s.Fields)
	for i := range names {
		names[i] = FieldName(i)
	}
	return &mongoClient{coll: d.mg.Collection(s.Table), names: names}
}

type mongoClient struct {
	coll  *mongo.Collection
	names []string
}

func (c *mongoClient) Read(ctx context.Context, key string, decode bool) (Row, error) {
	raw, err := c.coll.FindOne(ctx, bson.D{{Key: mongoKey, Value: key}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("%w: %s", errNoRecord, key)
	}
	if err != nil || !decode {
		return nil, err
	}
	_, row, err := mongoRecord(raw, len(c.names))
	return row, err
}

func (c *mongoClient) Update(ctx context.Context, key string, field int, value string) error {
	return c.set(ctx, key, bson.D{{Key: c.names[field], Value: value}})
}

func (c *mongoClient) UpdateRecord(ctx context.Context, key string, row Row) error {
	set := make(bson.D, len(row))
	for i, v := range row {
		set[i] = bson.E{Key: c.names[i], Value: v}
	}
	return c.set(ctx, key, set)
}

func (c *mongoClient) set(ctx context.Context, key string, set bson.D) error {
	res, err := c.coll.UpdateOne(ctx, bson.D{{Key: mongoKey, Value: key}}, bson.D{{Key: "$set", Value: set}})
	if err != nil {
		return err
	}
	if res.MatchedCount != 1 {
		return fmt.Errorf("%w: %s", errNoRecord, key)
	}
	return nil
}

func (c *mongoClient) Scan(ctx context.Context, from string, n int) ([]Record, error) {
	cur, err := c.coll.Find(ctx, bson.D{{Key: mongoKey, Value: bson.D{{Key: "$gte", Value: from}}}},
		options.Find().SetSort(bson.D{{Key: mongoKey, Value: 1}}).SetLimit(int64(n)))
	if err != nil {
		return nil, err
	}
	return mongoRecords(ctx, cur, len(c.names), n)
}

func (c *mongoClient) Close() error { return nil }

var (
	_ Scanner       = (*mongoClient)(nil)
	_ RecordUpdater = (*mongoClient)(nil)
)
