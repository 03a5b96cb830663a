// Package bg is the BG benchmark of interactive social networking actions
// (Barahmand and Ghandeharizadeh, CIDR 2013) as the write-back paper runs
// it (section 4.2): a social graph stored as one document per member in
// MongoDB or PostgreSQL, BG's seven actions in the mixes of the paper's
// Table 4, the SoAR found by ramping threads, and the validation of every
// read against the writes acknowledged before it started. It reaches the
// store directly or through an in-process sidecar over HTTP, and owns the
// bg database, the bg_members table and its sidecars' Redis keys; it
// touches nothing else, and leaves the command's report to package bgrun.
package bg
