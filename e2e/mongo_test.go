package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeback/writeback/internal/testenv"
	"github.com/writeback/writeback/pkg/client"
)

// mongoEnv is one test's world on the MongoDB-wire server: a database of
// its own, its collection "docs" behind the collection name coll, and a
// Redis prefix.
type mongoEnv struct {
	t      *testing.T
	prefix string
	uri    string
	dbName string
	coll   string
	docs   *mongo.Collection
	redis  *redis.Client
}

func newMongoEnv(t *testing.T) *mongoEnv {
	t.Helper()
	e := &mongoEnv{t: t, prefix: testenv.UniqueName(t, "e2e"), uri: testenv.MongoURI(t), dbName: testenv.UniqueName(t, "wb_e2e"), coll: "m"}
	e.redis = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	cl, err := mongo.Connect(options.Client().ApplyURI(e.uri))
	if err != nil {
		t.Fatal(err)
	}
	e.docs = cl.Database(e.dbName).Collection("docs")
	t.Cleanup(func() {
		ctx := context.Background()
		iter := e.redis.Scan(ctx, 0, e.prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			e.redis.Del(ctx, iter.Val())
		}
		e.redis.Close()
		_ = cl.Database(e.dbName).Drop(ctx)
		_ = cl.Disconnect(ctx)
	})
	return e
}

// config writes a sidecar config for the env's collection.
func (e *mongoEnv) config(listen, policy string) string {
	e.t.Helper()
	cfg := fmt.Sprintf(`listen: %s
listenResp: ""
redis:
  addrs: [%s]
  keyPrefix: %s
stores:
  mongo: {driver: mongodb, uri: %q, database: %s}
collections:
  %s: {store: mongo, table: docs, key: _id, policy: %s}
writeback:
  partitions: 16
  workers: 4
  batchSize: 64
  ownerLease: 1500ms
  pollInterval: 10ms
log: {level: warn}
`, listen, testenv.RedisAddr(e.t), e.prefix, e.uri, e.dbName, e.coll, policy)
	p := filepath.Join(e.t.TempDir(), "writeback.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// stored reads a document straight from the server, without the stamp.
func (e *mongoEnv) stored(id string) map[string]any {
	e.t.Helper()
	var d map[string]any
	err := e.docs.FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	delete(d, "_wbseq")
	return d
}

// mdocModel is what the clients know of one document: $inc amounts and
// $push values acknowledged or uncertain (the sidecar died while
// answering), and per tag whether its $addToSet and $pull were.
type mdocModel struct {
	acked     int64
	uncertain []int64
	pushed    map[string]bool // value -> acknowledged
	pushOrder map[int][]string
	tags      map[string]*tagModel
}

type tagModel struct {
	added, pulled         bool // acknowledged
	maybeAdd, maybePulled bool // uncertain
}

func newMDoc() *mdocModel {
	return &mdocModel{pushed: map[string]bool{}, pushOrder: map[int][]string{}, tags: map[string]*tagModel{}}
}

// check compares a stored document with the model.
func (m *mdocModel) check(d map[string]any) error {
	n := toInt64(d["n"])
	if !subsetSum(m.uncertain, n-m.acked) {
		return fmt.Errorf("n = %d: acknowledged sum %d plus no subset of the %d uncertain increments", n, m.acked, len(m.uncertain))
	}
	log := strs(d["log"])
	seen := map[string]int{}
	for _, v := range log {
		seen[v]++
		if _, ok := m.pushed[v]; !ok {
			return fmt.Errorf("log holds %q, which no client pushed", v)
		}
		if seen[v] > 1 {
			return fmt.Errorf("log holds %q twice (a $push applied twice)", v)
		}
	}
	for v, acked := range m.pushed {
		if acked && seen[v] == 0 {
			return fmt.Errorf("log lacks %q, an acknowledged $push", v)
		}
	}
	// Each client's pushes keep their order.
	pos := map[string]int{}
	for i, v := range log {
		pos[v] = i
	}
	for c, vals := range m.pushOrder {
		last := -1
		for _, v := range vals {
			if p, ok := pos[v]; ok {
				if p < last {
					return fmt.Errorf("client %d's pushes are out of order in %v", c, log)
				}
				last = p
			}
		}
	}
	tags := map[string]bool{}
	for _, v := range strs(d["tags"]) {
		if tags[v] {
			return fmt.Errorf("tags hold %q twice", v)
		}
		tags[v] = true
	}
	for v, tm := range m.tags {
		switch {
		case tm.pulled && tags[v]:
			return fmt.Errorf("tag %q is there after an acknowledged $pull", v)
		case tm.added && !tm.pulled && !tm.maybePulled && !tags[v]:
			return fmt.Errorf("tag %q is missing after an acknowledged $addToSet", v)
		case !tm.added && !tm.maybeAdd && tags[v]:
			return fmt.Errorf("tag %q is there but was never added", v)
		}
	}
	for v := range tags {
		if m.tags[v] == nil {
			return fmt.Errorf("tag %q is there but was never added", v)
		}
	}
	return nil
}

func toInt64(v any) int64 {
	switch x := v.(type) {
	case int32:
		return int64(x)
	case int64:
		return x
	case float64:
		return int64(x)
	}
	return 0
}

func strs(v any) []string {
	var out []string
	switch a := v.(type) {
	case bson.A:
		for _, x := range a {
			s, _ := x.(string)
			out = append(out, s)
		}
	case []any:
		for _, x := range a {
			s, _ := x.(string)
			out = append(out, s)
		}
	}
	return out
}

// mongoWorkload runs clients doing $inc, $push, $addToSet and $pull on
// docs documents through the HTTP API while the sidecar is SIGKILLed kills
// times (at random moments and at armed fault points: after buffering,
// between "conversion persisted" and "applied", between "applied" and
// "trimmed") and restarted. It returns the models and a fresh sidecar that
// has flushed everything.
func mongoWorkload(t *testing.T, e *mongoEnv, cfg, addr string, docs, clients, kills int, duration time.Duration) ([]*mdocModel, *sidecar) {
	t.Helper()
	faults := []string{"", "bgt.after-convert:1-6", "bgt.after-commit:1-6", "api.after-buffer:5-60", "bgt.after-convert:1-3"}
	cr := newCrashing(t, cfg, addr)
	current := cr.current
	ctx := context.Background()
	models := make([]*mdocModel, docs)
	for i := range models {
		models[i] = newMDoc()
		if _, err := current().c.Put(ctx, e.coll, docID(i), map[string]any{"n": 0, "log": []string{}, "tags": []string{}}); err != nil {
			t.Fatal(err)
		}
	}
	var modelMu sync.Mutex // guards models and counters
	var acked, uncertain, refused int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			k := 0
			var mine []string // tags this client added (acknowledged) and has not pulled
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := rng.IntN(docs)
				m := models[id]
				k++
				val := fmt.Sprintf("c%d-%d", c, k)
				var op map[string]any
				var amt int64
				kind := rng.IntN(20)
				var pullTag string
				switch {
				case kind < 10:
					amt = rng.Int64N(1_000_000) + 1
					op = map[string]any{"$inc": map[string]any{"n": amt}}
				case kind < 15:
					op = map[string]any{"$push": map[string]any{"log": val}}
				case kind < 18 || len(mine) == 0:
					val = tagFor(val, id)
					op = map[string]any{"$addToSet": map[string]any{"tags": val}}
				default:
					j := rng.IntN(len(mine))
					pullTag = mine[j]
					mine = slices.Delete(mine, j, j+1)
					id = tagDoc(pullTag)
					m = models[id]
					op = map[string]any{"$pull": map[string]any{"tags": pullTag}}
				}
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := current().c.Patch(rctx, e.coll, docID(id), op)
				cancel()
				modelMu.Lock()
				ok, sure := err == nil, err == nil || neverSent(err)
				switch {
				case ok:
					acked++
				case sure:
					refused++
				default:
					uncertain++
				}
				if sure && !ok {
					modelMu.Unlock()
					time.Sleep(5 * time.Millisecond)
					continue
				}
				switch {
				case amt > 0:
					if ok {
						m.acked += amt
					} else {
						m.uncertain = append(m.uncertain, amt)
					}
				case op["$push"] != nil:
					m.pushed[val] = ok
					m.pushOrder[c] = append(m.pushOrder[c], val)
				case pullTag != "":
					tm := m.tags[pullTag]
					tm.pulled = tm.pulled || ok
					tm.maybePulled = tm.maybePulled || !ok
				default:
					m.tags[val] = &tagModel{added: ok, maybeAdd: !ok}
					if ok {
						mine = append(mine, val)
					}
				}
				modelMu.Unlock()
				if !ok {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	// As in the core's crash test, an incarnation lives a random 100–400 ms
	// and, beyond that, until it has acknowledged perIncarnation writes or
	// died at its armed fault: under CI's load a start can outlast the
	// window, and a schedule by the clock alone kills sidecars that never
	// served (one CI run acknowledged 288 writes in 22 incarnations).
	const perIncarnation = 20
	ackedNow := func() int64 {
		modelMu.Lock()
		defer modelMu.Unlock()
		return acked
	}
	rng := rand.New(rand.NewPCG(3, 4))
	deadline := time.Now().Add(duration)
	for k := 0; k < kills || time.Now().Before(deadline); k++ {
		from := ackedNow()
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		if k >= kills {
			continue
		}
		for wait := time.Now().Add(10 * time.Second); time.Now().Before(wait); time.Sleep(5 * time.Millisecond) {
			if ackedNow()-from >= perIncarnation || cr.current().exited() {
				break
			}
		}
		cr.restart(faults[k%len(faults)])
	}
	close(stop)
	wg.Wait()
	if kills == 0 {
		return models, current()
	}
	final := cr.final()
	final.flush(t)
	t.Logf("%d kills; writes: %d acknowledged, %d uncertain, %d refused while down", kills, acked, uncertain, refused)
	if acked < 300 {
		t.Errorf("only %d writes acknowledged; the workload barely ran", acked)
	}
	return models, final
}

func docID(i int) string { return "d" + strconv.Itoa(i) }

// A client pulls only tags it added; the tag's text names its document.
func tagFor(val string, id int) string { return val + "@" + strconv.Itoa(id) }

func tagDoc(tag string) int {
	at := len(tag) - 1
	for tag[at] != '@' {
		at--
	}
	n, _ := strconv.Atoi(tag[at+1:])
	return n
}

// checkMongo compares every document, stored and as the sidecar reads it,
// with its model.
func checkMongo(t *testing.T, e *mongoEnv, sc *sidecar, models []*mdocModel) {
	t.Helper()
	for i, m := range models {
		d := e.stored(docID(i))
		if d == nil {
			t.Errorf("%s is missing", docID(i))
			continue
		}
		if err := m.check(d); err != nil {
			t.Errorf("%s (stored): %v", docID(i), err)
		}
		raw, _, err := sc.c.Get(context.Background(), e.coll, docID(i))
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(toInt64(got["n"])) != fmt.Sprint(toInt64(d["n"])) || fmt.Sprint(got["log"]) != fmt.Sprint(anyList(d["log"])) || len(strs(anyList(got["tags"]))) != len(strs(d["tags"])) {
			t.Errorf("%s: the sidecar reads %v, the server holds %v", docID(i), got, d)
		}
	}
}

func anyList(v any) []any {
	switch a := v.(type) {
	case bson.A:
		return []any(a)
	case []any:
		return a
	}
	return nil
}

// Acceptance 2: the core's concurrent workload on MongoDB — $inc, $push,
// $addToSet, $pull from 16 clients on 8 documents — ends with every
// document equal to the model, exactly.
func TestMongoConcurrentOperators(t *testing.T) {
	e := newMongoEnv(t)
	addr := freeAddr(t)
	cfg := e.config(addr, "write-back")
	models, sc := mongoWorkload(t, e, cfg, addr, 8, 16, 0, 4*time.Second)
	for _, m := range models {
		if len(m.uncertain) > 0 {
			t.Fatalf("writes failed without a crash: %v", m.uncertain)
		}
	}
	sc.flush(t)
	checkMongo(t, e, sc, models)
	if v := metricValue(t, addr, "writeback_converted_writes_total"); v < 1 {
		t.Errorf("writeback_converted_writes_total = %v; the appliers never converted", v)
	}
}

// Acceptance 3: SIGKILLed at least 20 times — at random, between
// "conversion persisted" and "applied", between "applied" and "trimmed",
// between buffering and acknowledging — the final documents equal the
// model of acknowledged writes.
func TestMongoCrashRecovery(t *testing.T) {
	e := newMongoEnv(t)
	addr := freeAddr(t)
	cfg := e.config(addr, "write-back")
	models, final := mongoWorkload(t, e, cfg, addr, 10, 8, 22, 0)
	checkMongo(t, e, final, models)
}

// Acceptance 4: BG's friendship actions through the HTTP API — invite then
// accept, invite then reject, thaw — read back correctly before and after
// a flush, with the cache entries evicted in between.
func TestMongoBGFriendship(t *testing.T) {
	e := newMongoEnv(t)
	addr := freeAddr(t)
	sc := start(t, e.config(addr, "write-back"), addr)
	ctx := context.Background()
	must := func(_ int64, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []string{"alice", "bob", "carol", "dave"} {
		must(sc.c.Put(ctx, e.coll, m, map[string]any{"name": m, "friends": []string{}, "pending": []string{}}))
	}
	invite := func(from, to string) {
		must(sc.c.Patch(ctx, e.coll, to, map[string]any{"$addToSet": map[string]any{"pending": from}}))
	}
	accept := func(from, to string) {
		must(sc.c.Patch(ctx, e.coll, to, map[string]any{"$pull": map[string]any{"pending": from}, "$addToSet": map[string]any{"friends": from}}))
		must(sc.c.Patch(ctx, e.coll, from, map[string]any{"$addToSet": map[string]any{"friends": to}}))
	}
	reject := func(from, to string) {
		must(sc.c.Patch(ctx, e.coll, to, map[string]any{"$pull": map[string]any{"pending": from}}))
	}
	thaw := func(a, b string) {
		must(sc.c.Patch(ctx, e.coll, a, map[string]any{"$pull": map[string]any{"friends": b}}))
		must(sc.c.Patch(ctx, e.coll, b, map[string]any{"$pull": map[string]any{"friends": a}}))
	}
	invite("alice", "bob")
	accept("alice", "bob")
	invite("carol", "bob")
	reject("carol", "bob")
	invite("dave", "alice")
	accept("dave", "alice")
	invite("carol", "dave")
	invite("bob", "carol")
	accept("bob", "carol")
	thaw("bob", "carol")
	want := map[string][2][]string{ // friends, pending
		"alice": {{"bob", "dave"}, {}},
		"bob":   {{"alice"}, {}},
		"carol": {{}, {}},
		"dave":  {{"alice"}, {"carol"}},
	}
	check := func(when string) {
		t.Helper()
		for m, fp := range want {
			d := getDoc(t, sc.c, e.coll, m)
			if got := sortedStrs(d["friends"]); fmt.Sprint(got) != fmt.Sprint(fp[0]) {
				t.Errorf("%s: %s's friends = %v; want %v", when, m, got, fp[0])
			}
			if got := sortedStrs(d["pending"]); fmt.Sprint(got) != fmt.Sprint(fp[1]) {
				t.Errorf("%s: %s's pending invitations = %v; want %v", when, m, got, fp[1])
			}
		}
	}
	check("buffered")
	for m := range want {
		if err := evictMongo(e, m); err != nil {
			t.Fatal(err)
		}
	}
	check("buffered, cache evicted")
	sc.flush(t)
	check("after flush")
	for m := range want {
		if err := evictMongo(e, m); err != nil {
			t.Fatal(err)
		}
	}
	check("after flush, cache evicted")
	for m, fp := range want {
		d := e.stored(m)
		if got := sortedStrs(anyList(d["friends"])); fmt.Sprint(got) != fmt.Sprint(fp[0]) {
			t.Errorf("stored: %s's friends = %v; want %v", m, got, fp[0])
		}
	}
}

func sortedStrs(v any) []string {
	out := strs(v)
	if out == nil {
		out = []string{}
	}
	sort.Strings(out)
	return out
}

func evictMongo(e *mongoEnv, id string) error {
	return evict(&env{redis: e.redis, prefix: e.prefix}, e.coll, id)
}

// Acceptance 5: a type error the current value shows is a 400 and buffers
// nothing; one only the store can tell (the stored field changed behind
// the cache) becomes a dead letter carrying the store's error, visible in
// status and metrics, and the changes around it are applied.
func TestMongoTypeErrors(t *testing.T) {
	e := newMongoEnv(t)
	addr := freeAddr(t)
	ctx := context.Background()
	// Another (fake) sidecar owns every partition: nothing is applied
	// until a flush, which applies all partitions.
	for p := range 16 {
		if err := e.redis.Set(ctx, fmt.Sprintf("%s:{%d}:owner", e.prefix, p), "elsewhere", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	sc := start(t, e.config(addr, "write-back"), addr)
	if _, err := sc.c.Put(ctx, e.coll, "a", map[string]any{"s": "text", "arr": 5, "n": 1}); err != nil {
		t.Fatal(err)
	}
	sc.flush(t)
	for _, op := range []map[string]any{
		{"$inc": map[string]any{"s": 1}},
		{"$push": map[string]any{"arr": 1}},
		{"$pull": map[string]any{"s": "x"}},
		{"$set": map[string]any{"s.inner": 1}},
	} {
		_, err := sc.c.Patch(ctx, e.coll, "a", op)
		var apiErr *client.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest {
			t.Errorf("%v: got %v; want a 400", op, err)
		} else {
			t.Logf("%v: 400 %s", op, apiErr.Message)
		}
	}
	// With the appliers idle, the field changes
	// behind the cache after the $inc was accepted against the number it
	// held: only the store can tell.
	for i, op := range []map[string]any{
		{"$set": map[string]any{"before": 1}},
		{"$inc": map[string]any{"n": 1}},
		{"$set": map[string]any{"after": 2}},
	} {
		if i == 2 {
			if _, err := e.docs.UpdateOne(ctx, bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: "now text"}}}}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := sc.c.Patch(ctx, e.coll, "a", op); err != nil {
			t.Fatal(err)
		}
	}
	sc.flush(t)
	st, err := sc.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadLetters != 1 || len(st.DeadLetterList) != 1 {
		t.Fatalf("dead letters %d (%+v); want 1", st.DeadLetters, st.DeadLetterList)
	}
	dl := st.DeadLetterList[0]
	if dl.ID != "a" || dl.Error == "" || !bytesContain(dl.Change, "$inc") {
		t.Errorf("dead letter %+v: want document a's $inc with the error", dl)
	}
	t.Logf("dead letter error: %s", dl.Error)
	d := e.stored("a")
	if d["before"] == nil || d["after"] == nil || d["n"] != "now text" {
		t.Errorf("stored %v: want the changes around the rejected one applied and n untouched", d)
	}
	waitFor(t, 5*time.Second, "the dead-letter gauge", func() bool {
		return metricValue(t, addr, "writeback_dead_letters") == 1
	})
}

func bytesContain(b []byte, s string) bool { return bytes.Contains(b, []byte(s)) }

// PUT/PATCH/DELETE/GET/scan under each policy, as for SQL collections:
// write-through and write-around reach the server before the answer.
func TestMongoPoliciesAndScan(t *testing.T) {
	for _, policy := range []string{"write-back", "write-through", "write-around"} {
		t.Run(policy, func(t *testing.T) {
			e := newMongoEnv(t)
			addr := freeAddr(t)
			sc := start(t, e.config(addr, policy), addr)
			ctx := context.Background()
			for _, id := range []string{"b", "a", "c"} {
				if _, err := sc.c.Put(ctx, e.coll, id, map[string]any{"n": 1, "o": map[string]any{"x": []int{1}}}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := sc.c.Patch(ctx, e.coll, "a", map[string]any{"$inc": map[string]any{"n": 2}, "$push": map[string]any{"o.x": 2}}); err != nil {
				t.Fatal(err)
			}
			if _, err := sc.c.Delete(ctx, e.coll, "c"); err != nil {
				t.Fatal(err)
			}
			if policy != "write-back" {
				if d := e.stored("a"); toInt64(d["n"]) != 3 || e.stored("c") != nil {
					t.Errorf("stored before any flush: a=%v c=%v; want n=3 and c gone", d, e.stored("c"))
				}
			}
			check := func(when string) {
				t.Helper()
				docs, err := sc.c.Scan(ctx, e.coll, "", 10)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, raw := range docs {
					var d struct {
						ID string `json:"_id"`
					}
					if err := json.Unmarshal(raw, &d); err != nil {
						t.Fatal(err)
					}
					got = append(got, d.ID)
				}
				if fmt.Sprint(got) != "[a b]" {
					t.Errorf("%s: scan = %v; want [a b]", when, got)
				}
				d := getDoc(t, sc.c, e.coll, "a")
				if fmt.Sprint(d["n"], d["o"]) != "3 map[x:[1 2]]" {
					t.Errorf("%s: a = %v", when, d)
				}
				if _, _, err := sc.c.Get(ctx, e.coll, "c"); !errIs(err, http.StatusNotFound) {
					t.Errorf("%s: get c = %v; want 404", when, err)
				}
			}
			check("before flush")
			sc.flush(t)
			if err := evictMongo(e, "a"); err != nil {
				t.Fatal(err)
			}
			check("after flush")
		})
	}
}
