// Package bg is the BG benchmark of interactive social networking actions
// (Barahmand and Ghandeharizadeh, CIDR 2013) as the write-back paper runs
// it (section 4.2): a social graph of members with profiles, friends and
// pending invitations, stored as one document per member in MongoDB
// (collection members of database bg) or PostgreSQL (table bg_members,
// jsonb friends and pending); BG's seven actions in the three mixes of the
// paper's Table 4; the Social Action Rating (SoAR), the highest throughput
// with at least 95 % of actions within 100 ms, found by ramping threads;
// and BG's validation: every read is checked against the writes that were
// acknowledged before it started.
//
// The database is reached directly (policies database and database-async)
// or through an in-process sidecar over HTTP (write-around, write-through,
// write-back). The package owns the bg database, the bg_members table and
// the sidecar's Redis keys of its runs; it touches nothing else.
package bg
