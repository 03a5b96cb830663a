// Package bgrun is the bg command of benchmarks/cmd/bg: its flags, the
// stores and policies it runs package bg's benchmark on, and the tables,
// ratios, JSON and plots it reports. It owns only its output files under
// --out; the graph, the actions, the validation and the stores are
// package bg's and must not move here.
package bgrun
