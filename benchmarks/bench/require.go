package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Requirement is one clause of a command's --require: the median over the
// rounds of policy A's throughput over policy B's, each round's ratio taken
// within the round, must be at least Min — on workload On only, when the
// clause names one (YCSB: "C:write-back-resp/database>=1.5"). A clause may
// name another of the command's metrics instead of throughput, and bound
// the ratio from above: "A:update-p50(write-back-resp/database)<=0.25" (Max
// set instead of Min).
type Requirement struct {
	On     string
	Metric string // "": throughput
	A, B   string
	Min    float64
	Max    float64
}

// Verdict is a requirement as a run judged it (the reports' "required").
// Case names what the ratio was taken on when a run has several (YCSB's
// workload and variant).
type Verdict struct {
	Case   string    `json:"case,omitempty"`
	Ratio  string    `json:"ratio"` // "a / b", after the metric's name if not throughput
	Min    float64   `json:"min"`
	Max    float64   `json:"max,omitempty"`
	Median float64   `json:"median"`
	Rounds []float64 `json:"rounds"`
	Met    bool      `json:"met"`
}

// ParseRequire parses --require: comma-separated "a/b>=x" clauses over
// policies that run (policies), with x a positive number. A command with
// workloads (YCSB's; nil: none) also takes "w:a/b>=x", a clause judged on
// workload w alone, which must be among them. A command with metrics
// besides throughput (nil: none) also takes "m(a/b)>=x" and "m(a/b)<=x",
// the ratio of metric m.
func ParseRequire(s string, policies, workloads, metrics []string) ([]Requirement, error) {
	var out []Requirement
	for _, c := range strings.Split(s, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		var r Requirement
		clause := c
		if on, rest, ok := strings.Cut(c, ":"); ok {
			r.On = strings.TrimSpace(on)
			switch {
			case workloads == nil:
				return nil, fmt.Errorf("--require: %q names a workload, and this command has none (write-back/database>=1.5)", c)
			case !slices.Contains(workloads, r.On):
				return nil, fmt.Errorf("--require: %q names workload %q, which is not among --workloads (%s)", c, r.On, strings.Join(workloads, ","))
			}
			clause = rest
		}
		pair, bound, atMost := strings.Cut(clause, "<=")
		ok := atMost
		if !atMost {
			pair, bound, ok = strings.Cut(clause, ">=")
		}
		if m, inner, found := strings.Cut(pair, "("); found {
			r.Metric = strings.TrimSpace(m)
			pair, found = strings.CutSuffix(strings.TrimSpace(inner), ")")
			switch {
			case !found:
				return nil, fmt.Errorf("--require: %q opens a parenthesis it does not close (update-p50(write-back/database)<=0.25)", c)
			case metrics == nil:
				return nil, fmt.Errorf("--require: %q names a metric, and this command judges throughput only (write-back/database>=1.5)", c)
			case !slices.Contains(metrics, r.Metric):
				return nil, fmt.Errorf("--require: %q names metric %q; this command has %s", c, r.Metric, strings.Join(metrics, ", "))
			}
		}
		a, b, ok2 := strings.Cut(pair, "/")
		if !ok || !ok2 {
			return nil, fmt.Errorf("--require: %q is not policy/policy>=ratio (write-back/database>=1.5)", c)
		}
		r.A, r.B = strings.TrimSpace(a), strings.TrimSpace(b)
		for _, p := range []string{r.A, r.B} {
			if !slices.Contains(policies, p) {
				return nil, fmt.Errorf("--require: %q names %q, which is not among --policies (%s)", c, p, strings.Join(policies, ","))
			}
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(bound), 64)
		if err != nil || !(x > 0) || r.A == r.B {
			return nil, fmt.Errorf("--require: %q needs two different policies and a positive ratio", c)
		}
		if atMost {
			r.Max = x
		} else {
			r.Min = x
		}
		out = append(out, r)
	}
	return out, nil
}

// Judge judges r on the rounds' ratios of its pair (none: not met).
func (r Requirement) Judge(rounds []float64) Verdict {
	ratio := r.A + " / " + r.B
	if r.Metric != "" {
		ratio = r.Metric + " " + ratio
	}
	v := Verdict{Ratio: ratio, Min: r.Min, Max: r.Max, Rounds: rounds}
	if len(rounds) > 0 {
		v.Median = Median(rounds)
		v.Met = v.Median >= r.Min && (r.Max == 0 || v.Median <= r.Max)
	}
	return v
}

// String is the verdict's line in a report.
func (v Verdict) String() string {
	state := "met"
	if !v.Met {
		state = "NOT met"
	}
	on := ""
	if v.Case != "" {
		on = " on " + v.Case
	}
	bound := "≥ " + Ratio(v.Min, 1)
	if v.Max > 0 {
		bound = "≤ " + Ratio(v.Max, 1)
	}
	if len(v.Rounds) == 0 {
		return fmt.Sprintf("required %s %s%s: no round ran both, NOT met", v.Ratio, bound, on)
	}
	return fmt.Sprintf("required %s %s%s: %s, %s", v.Ratio, bound, on, Ratio(v.Median, 1), state)
}

// Median is the middle of xs (the mean of the two middle ones for an even
// count; 0 for none); xs is not changed.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
