package mongovectors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/store"
	"github.com/writeback/writeback/internal/testenv"
)

// vector is one entry of ../testdata/vectors.json (see the change
// package's TestVectors, which checks the change package against want).
type vector struct {
	Name     string            `json:"name"`
	Doc      json.RawMessage   `json:"doc"`
	Update   json.RawMessage   `json:"update"`
	Updates  []json.RawMessage `json:"updates"`
	Want     json.RawMessage   `json:"want"`
	Error    string            `json:"error"`
	FerretDB string            `json:"ferretdb"`
}

func (v vector) updates() []json.RawMessage {
	if v.Update != nil {
		return []json.RawMessage{v.Update}
	}
	return v.Updates
}

// TestVectorsAgainstServer runs every vector through the change package and
// through the server (insert the document, updateOne with the same update
// documents, read it back) and compares the two documents: top-level fields
// as a set, nested objects in order, numbers with their kind (an integer —
// int32 or int64 on the server — is not a double; see change/value.go).
// Error vectors must fail in both. Vectors on which FerretDB deviates from
// MongoDB's documented behavior (their "ferretdb" note says how) are run on
// the server for the log but not compared; the change package follows
// MongoDB, which TestVectors checks.
//
// For the vectors that succeed it also sends the server what a MongoDB
// store will send: the compacted changes (CompactDoc) rendered by Updates,
// and the idempotent changes (Idempotent) rendered by Updates, applied twice
// as after a crash before the buffered write was trimmed.
func TestVectorsAgainstServer(t *testing.T) {
	uri := testenv.MongoURI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	db := client.Database(testenv.UniqueName(t, "wb_vectors"))
	defer db.Drop(context.Background())
	coll := db.Collection("docs")

	b, err := os.ReadFile("../testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors []vector
	if err := json.Unmarshal(b, &vectors); err != nil {
		t.Fatal(err)
	}
	schema, err := change.NewDynamicSchema("_id")
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	for i, v := range vectors {
		t.Run(v.Name, func(t *testing.T) {
			id := fmt.Sprintf("v%03d", i)
			doc := parseDoc(t, schema, id, v.Doc)
			got, changes, cerr := throughChange(schema, doc, v.updates())
			sdoc, serr := throughServer(ctx, t, coll, id, doc, v.updates())
			if v.FerretDB != "" {
				t.Logf("not compared: %s; the server gave %s (error %v), the change package %s (error %v)",
					v.FerretDB, show(sdoc), serr, show(got), cerr)
				return
			}
			compared++
			if v.Error != "" {
				if cerr == nil || serr == nil {
					t.Fatalf("want both to fail (%s error): change package: %v; server: %v (document %s)", v.Error, cerr, serr, show(sdoc))
				}
				var ce *change.Error
				var te *change.TypeError
				if v.Error == "client" && !errors.As(cerr, &ce) || v.Error == "type" && !errors.As(cerr, &te) {
					t.Fatalf("change package error %T (%v), want a %s error", cerr, cerr, v.Error)
				}
				t.Logf("both refuse it: change package: %v; server: %v", cerr, serr)
				return
			}
			if cerr != nil || serr != nil {
				t.Fatalf("change package: %v; server: %v", cerr, serr)
			}
			want := parseDoc(t, schema, id, v.Want)
			if !equal(sdoc, got) || !equal(got, want) {
				t.Fatalf("server  %s\nchange  %s\nwant    %s", show(sdoc), show(got), show(want))
			}

			// What a MongoDB store sends: compacted …
			cid := id + "-compact"
			compacted := change.CompactDoc(changes)
			cdoc, err := throughServerOps(ctx, t, coll, cid, doc, compacted, 1)
			want["_id"] = json.RawMessage(strconv.Quote(cid))
			if err != nil || !equal(cdoc, want) {
				t.Errorf("CompactDoc %s via Updates: got %s, %v; want %s", opsString(compacted), show(cdoc), err, show(want))
			}
			// … and idempotent, applied twice.
			iid := id + "-idem"
			conv, err := change.Idempotent(doc, changes)
			if err != nil {
				t.Fatalf("Idempotent: %v", err)
			}
			idoc, err := throughServerOps(ctx, t, coll, iid, doc, conv, 2)
			want["_id"] = json.RawMessage(strconv.Quote(iid))
			if err != nil || !equal(idoc, want) {
				t.Errorf("Idempotent %s via Updates, twice: got %s, %v; want %s", opsString(conv), show(idoc), err, show(want))
			}
		})
	}
	if compared < 60 {
		t.Errorf("only %d vectors compared with the server", compared)
	}
}

func parseDoc(t *testing.T, s *change.Schema, id string, body json.RawMessage) change.Doc {
	t.Helper()
	c, err := change.ParsePut(s, id, body)
	if err != nil {
		t.Fatalf("document %s: %v", body, err)
	}
	return c.Doc
}

// throughChange is what the change package makes of the updates.
func throughChange(s *change.Schema, doc change.Doc, updates []json.RawMessage) (change.Doc, []change.Change, error) {
	var changes []change.Change
	for _, u := range updates {
		c, err := change.ParsePatch(s, u)
		if err != nil {
			return nil, nil, err
		}
		changes = append(changes, c)
	}
	got, err := change.ApplyAll(doc, changes)
	return got, changes, err
}

// throughServer inserts doc as id, sends the updates and reads it back.
func throughServer(ctx context.Context, t *testing.T, coll *mongo.Collection, id string, doc change.Doc, updates []json.RawMessage) (change.Doc, error) {
	t.Helper()
	if err := insert(ctx, coll, doc); err != nil {
		return nil, err
	}
	for _, u := range updates {
		if err := update(ctx, coll, id, u); err != nil {
			return read(ctx, t, coll, id), err
		}
	}
	return read(ctx, t, coll, id), nil
}

// throughServerOps inserts doc as id and sends the patches' operators
// rendered by change.Updates, times times over.
func throughServerOps(ctx context.Context, t *testing.T, coll *mongo.Collection, id string, doc change.Doc, changes []change.Change, times int) (change.Doc, error) {
	t.Helper()
	d := doc.Clone()
	d["_id"] = json.RawMessage(strconv.Quote(id))
	if err := insert(ctx, coll, d); err != nil {
		return nil, err
	}
	for range times {
		for _, c := range changes {
			if c.Kind != change.Patch {
				return nil, fmt.Errorf("unexpected %v", c.Kind)
			}
			for _, u := range change.Updates(c.Ops) {
				if err := update(ctx, coll, id, u); err != nil {
					return nil, fmt.Errorf("update %s: %w", u, err)
				}
			}
		}
	}
	return read(ctx, t, coll, id), nil
}

func insert(ctx context.Context, coll *mongo.Collection, doc change.Doc) error {
	d := bson.D{}
	for _, k := range sortedKeys(doc) {
		v, err := store.ToBSON(doc[k])
		if err != nil {
			return err
		}
		d = append(d, bson.E{Key: k, Value: v})
	}
	if _, err := coll.InsertOne(ctx, d); err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	return nil
}

func update(ctx context.Context, coll *mongo.Collection, id string, u json.RawMessage) error {
	ub, err := store.ToBSON(u)
	if err != nil {
		return err
	}
	res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, ub.Document())
	if err != nil {
		return err
	}
	if res.MatchedCount != 1 {
		return fmt.Errorf("the update matched %d documents", res.MatchedCount)
	}
	return nil
}

func read(ctx context.Context, t *testing.T, coll *mongo.Collection, id string) change.Doc {
	t.Helper()
	raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	// The MongoDB store's own conversion, which its tests check on its own
	// (int32/int64/double kinds, Extended JSON for other types).
	doc, _, err := store.FromBSON(raw)
	if err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	return doc
}

func equal(a, b change.Doc) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

func sortedKeys(d change.Doc) []string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func show(d change.Doc) string {
	if d == nil {
		return "<none>"
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range sortedKeys(d) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", k, d[k])
	}
	b.WriteByte('}')
	return b.String()
}

func opsString(changes []change.Change) string {
	var parts []string
	for _, c := range changes {
		for _, u := range change.Updates(c.Ops) {
			parts = append(parts, string(u))
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
