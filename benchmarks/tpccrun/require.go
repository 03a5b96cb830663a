package tpccrun

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/writeback/writeback/benchmarks/tpcc"
)

// requirement is one clause of --require: the median over the rounds of
// policy A's tpmC over policy B's, each round's taken within the round,
// must be at least Min.
type requirement struct {
	A, B string
	Min  float64
}

// verdict is a requirement as a run judged it (the report's "required").
type verdict struct {
	Ratio  string    `json:"ratio"` // "a / b"
	Min    float64   `json:"min"`
	Median float64   `json:"median"`
	Rounds []float64 `json:"rounds"`
	Met    bool      `json:"met"`
}

// parseRequire parses --require: comma-separated "a/b>=x" clauses over
// policies that run (policies), with x a positive number.
func parseRequire(s string, policies []string) ([]requirement, error) {
	var out []requirement
	for _, c := range strings.Split(s, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		pair, least, ok := strings.Cut(c, ">=")
		a, b, ok2 := strings.Cut(pair, "/")
		if !ok || !ok2 {
			return nil, fmt.Errorf("--require: %q is not policy/policy>=ratio (write-back/database>=1.5)", c)
		}
		r := requirement{A: strings.TrimSpace(a), B: strings.TrimSpace(b)}
		for _, p := range []string{r.A, r.B} {
			if !slices.Contains(policies, p) {
				return nil, fmt.Errorf("--require: %q names %q, which is not among --policies (%s)", c, p, strings.Join(policies, ","))
			}
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(least), 64)
		if err != nil || !(x > 0) || r.A == r.B {
			return nil, fmt.Errorf("--require: %q needs two different policies and a positive ratio", c)
		}
		r.Min = x
		out = append(out, r)
	}
	return out, nil
}

// judge checks each requirement against the runs.
func judge(reqs []requirement, runs []tpcc.Outcome) []verdict {
	out := make([]verdict, 0, len(reqs))
	for _, r := range reqs {
		v := verdict{Ratio: r.A + " / " + r.B, Min: r.Min, Rounds: roundRatios(runs, r.A, r.B)}
		if len(v.Rounds) > 0 {
			v.Median = median(v.Rounds)
			v.Met = v.Median >= r.Min
		}
		out = append(out, v)
	}
	return out
}
