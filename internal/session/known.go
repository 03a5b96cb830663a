package session

import (
	"encoding/json"
	"sync"
	"time"
)

// knownSessions is what this process knows of the sessions it read in:
// each one's record as of its n-th note — the keys noted with their lease
// modes, and its start — and the values it read under the session's
// leases. A commit of a session known here need not read its record first
// (commitBasis): commitScript checks that the record still counts n notes,
// and answers -5, having changed nothing, when another process noted keys
// meanwhile. Knowledge is only ever dropped, never guessed: a note this
// process did not see, a failed read, a commit or abort forgets the
// session, and the commit then reads the record as before.
type knownSessions struct {
	mu sync.Mutex
	m  map[string]*knownSession
}

// knownSession is one session's record as of its notes-th note.
type knownSession struct {
	start  int64
	notes  int64
	read   map[string]string // key → lease mode
	values map[string]any    // key → the entry read under its lease (a string; nil: none)
	at     time.Time         // when it was first noted here
}

// maxKnown bounds the sessions remembered; past it, those older than the
// session timeout go, then any (they are read from Redis instead).
const maxKnown = 4096

// noted records that session id's notes-th note (recordScript's count)
// noted keys in mode; start is the session's. The first note starts what
// is known of it; a later one extends it only if the one before was seen
// here too. An X is never downgraded, as in the record.
func (ks *knownSessions) noted(id string, start, notes int64, mode string, keys []string, timeout time.Duration) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	k := ks.m[id]
	switch {
	case notes == 1:
		if ks.m == nil {
			ks.m = map[string]*knownSession{}
		}
		if len(ks.m) >= maxKnown {
			ks.shrink(timeout)
		}
		k = &knownSession{start: start, read: map[string]string{}, values: map[string]any{}, at: time.Now()}
		ks.m[id] = k
	case k == nil || k.notes != notes-1 || k.start != start:
		delete(ks.m, id)
		return
	}
	k.notes = notes
	for _, key := range keys {
		if k.read[key] != "X" {
			k.read[key] = mode
		}
	}
}

// shrink drops the sessions older than timeout and, if too many are left,
// as many others.
func (ks *knownSessions) shrink(timeout time.Duration) {
	for id, k := range ks.m {
		if time.Since(k.at) > timeout {
			delete(ks.m, id)
		}
	}
	for id := range ks.m {
		if len(ks.m) < maxKnown/2 {
			break
		}
		delete(ks.m, id)
	}
}

// read records the values session id read under its leases: vals[i] is
// refs[i]'s entry (nil: none).
func (ks *knownSessions) read(id string, refs []ref, vals []json.RawMessage) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	k := ks.m[id]
	if k == nil {
		return
	}
	for i, r := range refs {
		if vals[i] == nil {
			k.values[r.key] = nil
		} else {
			k.values[r.key] = string(vals[i])
		}
	}
}

// take returns what is known of session id and forgets it; nil when
// nothing is, or it is older than timeout.
func (ks *knownSessions) take(id string, timeout time.Duration) *knownSession {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	k := ks.m[id]
	delete(ks.m, id)
	if k == nil || time.Since(k.at) > timeout {
		return nil
	}
	return k
}

// forget drops what is known of session id.
func (ks *knownSessions) forget(id string) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	delete(ks.m, id)
}
