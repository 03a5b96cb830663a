package bg

import (
	"context"
	"fmt"

	"github.com/writeback/writeback/benchmarks/bench"
)

// Conn runs BG's actions on one store through one policy: the store's own
// client, or a sidecar's HTTP API. A Conn is safe for concurrent use by
// the benchmark's threads.
type Conn interface {
	// Profile reads member m's profile and the lengths of its two lists
	// (View Profile).
	Profile(ctx context.Context, m int32) (friends, pending int, err error)
	// List reads member m's list l and the profiles of its first n members
	// (List Friends, List Pending Friends). It returns the list's length
	// and the members whose profiles it read, in the list's order.
	List(ctx context.Context, m int32, l List, n int) (count int, shown []int32, err error)
	// Update applies one member's update and returns once the store or the
	// sidecar acknowledged it.
	Update(ctx context.Context, u Update) error
	// Close releases the Conn's connections.
	Close() error
}

// Batcher is a Conn that applies the updates of one action together (one
// SQL transaction). Conns that are not Batchers get them one by one.
type Batcher interface {
	UpdateAll(ctx context.Context, us []Update) error
}

// Store is a database holding the graph, reached directly: it loads the
// initial graph, opens Conns of the database policies, and reads every
// member's lists for the final check.
type Store interface {
	// Name is the store's driver name: mongodb or postgres.
	Name() string
	// Load replaces whatever the store holds under the benchmark's names
	// by the initial graph g (profiles drawn from seed).
	Load(ctx context.Context, g Graph, seed uint64) error
	// Open returns a Conn talking to the database directly; async makes
	// its writes commit asynchronously (bench.AsyncDSN).
	Open(ctx context.Context, async bool) (Conn, error)
	// Snapshot reads every member's two lists.
	Snapshot(ctx context.Context) (map[int32]Stored, error)
	// Collection and Key are what a sidecar serving the graph is
	// configured with; DSN and Database say where the store is.
	Collection() string
	Key() string
	DSN() string
	Database() string
	// Close releases the Store's connections.
	Close() error
}

// memberDoc is a member's document as the sidecar's HTTP API and MongoDB
// return it (PostgreSQL's key column id, MongoDB's _id and _wbseq aside).
type memberDoc struct {
	Username  string   `json:"username" bson:"username"`
	PW        string   `json:"pw" bson:"pw"`
	FirstName string   `json:"firstname" bson:"firstname"`
	LastName  string   `json:"lastname" bson:"lastname"`
	Gender    string   `json:"gender" bson:"gender"`
	DOB       string   `json:"dob" bson:"dob"`
	JDate     string   `json:"jdate" bson:"jdate"`
	LDate     string   `json:"ldate" bson:"ldate"`
	Address   string   `json:"address" bson:"address"`
	Email     string   `json:"email" bson:"email"`
	Tel       string   `json:"tel" bson:"tel"`
	About     string   `json:"about" bson:"about"`
	Friends   []string `json:"friends" bson:"friends"`
	Pending   []string `json:"pending" bson:"pending"`
}

// profileDoc is a member document's profile, without its lists: what a
// list action shows of each member, as the database policies select only
// the profile's columns (decoding skips the lists).
type profileDoc struct {
	Username  string `json:"username"`
	PW        string `json:"pw"`
	FirstName string `json:"firstname"`
	LastName  string `json:"lastname"`
	Gender    string `json:"gender"`
	DOB       string `json:"dob"`
	JDate     string `json:"jdate"`
	LDate     string `json:"ldate"`
	Address   string `json:"address"`
	Email     string `json:"email"`
	Tel       string `json:"tel"`
	About     string `json:"about"`
}

// countedDoc is a member document's profile and the lengths of its lists:
// what viewing a profile shows, as the database policies select the
// profile's columns and the lists' cardinalities.
type countedDoc struct {
	profileDoc
	Friends listLen `json:"friends"`
	Pending listLen `json:"pending"`
}

// listLen is the number of elements of a JSON array, counted without
// decoding them.
type listLen int

// UnmarshalJSON counts the array's elements (countElems).
func (n *listLen) UnmarshalJSON(b []byte) error {
	c, err := countElems(b)
	*n = listLen(c)
	return err
}

// checkProfile is memberDoc.checkProfile.
func (d *profileDoc) checkProfile(id string) error {
	if d.Username == "" || d.About == "" {
		return fmt.Errorf("bg: %s has no profile", id)
	}
	return nil
}

func (d *memberDoc) list(l List) []string {
	if l == Friends {
		return d.Friends
	}
	return d.Pending
}

// checkProfile tells a document without a profile (a read of a member that
// does not exist, or a broken document) from a member's.
func (d *memberDoc) checkProfile(id string) error {
	if d.Username == "" || d.About == "" {
		return fmt.Errorf("bg: %s has no profile", id)
	}
	return nil
}

func ids(xs []int32) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = ID(x)
	}
	return out
}

func parseIDs(ss []string) ([]int32, error) {
	out := make([]int32, len(ss))
	for i, s := range ss {
		x, err := ParseID(s)
		if err != nil {
			return nil, err
		}
		out[i] = x
	}
	return out, nil
}

// parseStored parses a member's id and lists as a store holds them.
func parseStored(id string, friends, pending []string) (m int32, st Stored, err error) {
	if m, err = ParseID(id); err != nil {
		return 0, Stored{}, err
	}
	if st.Friends, err = parseIDs(friends); err != nil {
		return 0, Stored{}, err
	}
	if st.Pending, err = parseIDs(pending); err != nil {
		return 0, Stored{}, err
	}
	return m, st, nil
}

// connDSN is the DSN of a Conn: dsn itself, or with async its
// asynchronous-commit variant (bench.AsyncDSN).
func connDSN(driver, dsn string, async bool) (string, error) {
	if !async {
		return dsn, nil
	}
	return bench.AsyncDSN(driver, dsn)
}

// distinct is the number of different members in xs. A list holding one
// twice is the validation's to report, not an error of the read.
func distinct(xs []int32) int {
	seen := make(map[int32]struct{}, len(xs))
	for _, x := range xs {
		seen[x] = struct{}{}
	}
	return len(seen)
}
