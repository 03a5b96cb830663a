package bg

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// MongoDatabase and MongoCollection are where the graph lives in MongoDB.
const (
	MongoDatabase   = "bg"
	MongoCollection = "members"
)

// Mongo is the graph in MongoDB (or FerretDB): one document per member in
// bg.members, keyed by a string _id, with arrays friends and pending.
type Mongo struct {
	uri    string
	client *mongo.Client
	coll   *mongo.Collection
}

// OpenMongo connects to the MongoDB server at uri, the graph in collection
// coll of database bg (MongoCollection unless tests want one of their
// own).
func OpenMongo(ctx context.Context, uri, coll string) (*Mongo, error) {
	c, err := connectMongo(ctx, uri)
	if err != nil {
		return nil, err
	}
	return &Mongo{uri: uri, client: c, coll: c.Database(MongoDatabase).Collection(coll)}, nil
}

func connectMongo(ctx context.Context, uri string) (*mongo.Client, error) {
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetMaxPoolSize(64).SetAppName("bg"))
	if err != nil {
		return nil, fmt.Errorf("bg: MongoDB URI %q: %v", uri, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx, nil); err != nil {
		_ = c.Disconnect(context.Background())
		return nil, fmt.Errorf("cannot connect to MongoDB at %s (%v); start the services with `make services`", uri, err)
	}
	return c, nil
}

// Server names the server: "MongoDB 7.0.5", or "FerretDB v1.24.0 (…)"
// for FerretDB, whose buildInfo says so.
func (s *Mongo) Server(ctx context.Context) string {
	var bi struct {
		Version  string `bson:"version"`
		FerretDB string `bson:"ferretdbVersion"`
		Features struct {
			Handler string `bson:"handler"`
		} `bson:"ferretdbFeatures"`
	}
	if err := s.client.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&bi); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	if bi.FerretDB != "" {
		return "FerretDB " + bi.FerretDB + " (MongoDB " + bi.Version + " protocol)"
	}
	return "MongoDB " + bi.Version
}

func (s *Mongo) Name() string       { return "mongodb" }
func (s *Mongo) Collection() string { return s.coll.Name() }
func (s *Mongo) Key() string        { return "_id" }
func (s *Mongo) DSN() string        { return s.uri }
func (s *Mongo) Database() string   { return MongoDatabase }
func (s *Mongo) Close() error       { return s.client.Disconnect(context.Background()) }

// Load drops bg.members and inserts the graph, 500 documents per insert.
func (s *Mongo) Load(ctx context.Context, g Graph, seed uint64) error {
	if err := s.coll.Drop(ctx); err != nil {
		return fmt.Errorf("bg: dropping %s.%s: %w", MongoDatabase, s.coll.Name(), err)
	}
	batch := make([]any, 0, 500)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := s.coll.InsertMany(ctx, batch)
		batch = batch[:0]
		if err != nil {
			return fmt.Errorf("bg: loading %s.%s: %w", MongoDatabase, s.coll.Name(), err)
		}
		return nil
	}
	for m := range int32(g.Members) {
		p := Profile(m, seed)
		d := bson.D{{Key: "_id", Value: ID(m)}}
		for i, f := range ProfileFields {
			d = append(d, bson.E{Key: f, Value: p[i]})
		}
		d = append(d, bson.E{Key: "friends", Value: ids(g.Initial(m, Friends))}, bson.E{Key: "pending", Value: ids(g.Initial(m, Pending))})
		batch = append(batch, d)
		if len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// Snapshot reads every member's lists.
func (s *Mongo) Snapshot(ctx context.Context) (map[int32]Stored, error) {
	cur, err := s.coll.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "friends", Value: 1}, {Key: "pending", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("bg: reading %s.%s: %w", MongoDatabase, s.coll.Name(), err)
	}
	defer cur.Close(ctx)
	out := map[int32]Stored{}
	for cur.Next(ctx) {
		var d struct {
			ID      string   `bson:"_id"`
			Friends []string `bson:"friends"`
			Pending []string `bson:"pending"`
		}
		if err := cur.Decode(&d); err != nil {
			return nil, err
		}
		m, st, err := parseStored(d.ID, d.Friends, d.Pending)
		if err != nil {
			return nil, err
		}
		out[m] = st
	}
	return out, cur.Err()
}

// Open returns a Conn of its own client; async uses MongoDB's w=1,
// journal=false write concern.
func (s *Mongo) Open(ctx context.Context, async bool) (Conn, error) {
	uri, err := connDSN("mongodb", s.uri, async)
	if err != nil {
		return nil, err
	}
	c, err := connectMongo(ctx, uri)
	if err != nil {
		return nil, err
	}
	return &mongoConn{client: c, coll: c.Database(MongoDatabase).Collection(s.coll.Name())}, nil
}

type mongoConn struct {
	client *mongo.Client
	coll   *mongo.Collection
	// docLocks serialize this Conn's updates of one document (striped by
	// member). MongoDB applies each update of a document atomically, so
	// concurrent $push and $pull of one array all take effect; FerretDB
	// v1.24 on SQLite does not: it reads the document, changes it and
	// writes it back, and of concurrent updates of one document only some
	// survive (100 acknowledged $push by 4 threads left 28 elements). BG's
	// threads update one member concurrently whenever two actions involve
	// it, so without this the database policies lose acknowledged writes,
	// which the validation reports. The sidecar needs no such lock: it
	// applies each document's changes in order, one batch at a time.
	docLocks [256]sync.Mutex
}

var noLists = options.Find().SetProjection(bson.D{{Key: "friends", Value: 0}, {Key: "pending", Value: 0}})

func (c *mongoConn) Profile(ctx context.Context, m int32) (int, int, error) {
	var d memberDoc
	id := ID(m)
	if err := c.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
		return 0, 0, fmt.Errorf("bg: reading %s: %w", id, err)
	}
	if err := d.checkProfile(id); err != nil {
		return 0, 0, err
	}
	return len(d.Friends), len(d.Pending), nil
}

func (c *mongoConn) List(ctx context.Context, m int32, l List, n int) (int, []int32, error) {
	var d memberDoc
	id := ID(m)
	proj := options.FindOne().SetProjection(bson.D{{Key: l.String(), Value: 1}})
	if err := c.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, proj).Decode(&d); err != nil {
		return 0, nil, fmt.Errorf("bg: reading %s: %w", id, err)
	}
	list := d.list(l)
	shown, err := parseIDs(list[:min(n, len(list))])
	if err != nil || len(shown) == 0 {
		return len(list), shown, err
	}
	cur, err := c.coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: list[:len(shown)]}}}}, noLists)
	if err != nil {
		return 0, nil, fmt.Errorf("bg: reading the profiles of %s's %s: %w", id, l, err)
	}
	var profiles []memberDoc
	if err := cur.All(ctx, &profiles); err != nil {
		return 0, nil, fmt.Errorf("bg: reading the profiles of %s's %s: %w", id, l, err)
	}
	if want := distinct(shown); len(profiles) != want {
		return 0, nil, fmt.Errorf("bg: %d of the %d profiles %s lists among its %s exist", len(profiles), want, id, l)
	}
	return len(list), shown, nil
}

// mongoUpdate is the update document of u: $push for an addition, $pull
// for a removal (the benchmark only adds members that are absent).
func mongoUpdate(u Update) bson.D {
	var push, pull bson.D
	for _, op := range u.Ops {
		if op.Add {
			push = append(push, bson.E{Key: op.List.String(), Value: ID(op.X)})
		} else {
			pull = append(pull, bson.E{Key: op.List.String(), Value: ID(op.X)})
		}
	}
	var d bson.D
	if len(push) > 0 {
		d = append(d, bson.E{Key: "$push", Value: push})
	}
	if len(pull) > 0 {
		d = append(d, bson.E{Key: "$pull", Value: pull})
	}
	return d
}

func (c *mongoConn) Update(ctx context.Context, u Update) error {
	id := ID(u.M)
	mu := &c.docLocks[uint32(u.M)%uint32(len(c.docLocks))]
	mu.Lock()
	defer mu.Unlock()
	res, err := c.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, mongoUpdate(u))
	if err != nil {
		return fmt.Errorf("bg: updating %s: %w", id, err)
	}
	if res.MatchedCount != 1 {
		return fmt.Errorf("bg: updating %s: no such member", id)
	}
	return nil
}

func (c *mongoConn) Close() error { return c.client.Disconnect(context.Background()) }

var _ Store = (*Mongo)(nil)
var _ Conn = (*mongoConn)(nil)
