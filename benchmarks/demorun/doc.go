// Package demorun is the demo command of benchmarks/cmd/demo (`make demo`):
// its flags, the runs of one YCSB mix against the database alone and
// through a sidecar under each write policy, and the table, ratios and
// JSON it reports (Main says what a run does). It owns the usertable it
// loads (dropped at the end unless --keep or a failure) and its sidecars'
// Redis prefixes, and nothing else; the workload is package ycsb's and
// must not move here.
package demorun
