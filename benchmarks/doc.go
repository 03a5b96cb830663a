// Package benchmarks holds the sidecar's load harnesses and, in this
// directory, the Go micro-benchmarks of `make bench`: a cache hit, a
// one-field update and the Redis-protocol front door, each beside its
// baseline. Below it, bench is what the commands share; ycsb, bg and tpcc
// are the workloads; sidecar runs a sidecar in-process; ycsbrun, bgrun,
// tpccrun and demorun are each command's flags, runs and report; and
// cmd/ycsb, cmd/bg, cmd/tpcc and cmd/demo are their mains, one call each
// (see README.md in this directory). Nothing here is imported by the
// sidecar, and nothing here touches a table or a Redis key that its own
// runs did not create.
package benchmarks
