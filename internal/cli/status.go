package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/writeback/writeback/pkg/client"
)

type statusOptions struct {
	lookupEnv LookupEnv
	addr      string
	token     string
	json      bool
	out       io.Writer
}

// NewCmdStatus builds "writeback status".
func NewCmdStatus(lookupEnv LookupEnv) *cobra.Command {
	opts := &statusOptions{lookupEnv: lookupEnv}
	cmd := &cobra.Command{
		Use:   "status [--addr URL] [--json]",
		Short: "Print pending writes, pinned bytes, policies and dead letters",
		Long: `Print a running sidecar's view of the buffer: pending changes and documents,
pinned bytes, the age of the oldest pending change, the sidecars sharing the
partitions, each collection's policy and write-through fallback, the dead
letters with their errors, and warnings.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.out = cmd.OutOrStdout()
			if err := completeClient(cmd, opts.lookupEnv, &opts.token); err != nil {
				return usageError(err)
			}
			return failed(runStatus(cmd.Context(), opts))
		},
	}
	addClientFlags(cmd, &opts.addr, &opts.token)
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the status as JSON (env WRITEBACK_JSON)")
	return cmd
}

// statusTimeout bounds a status call: the sidecar answers from counters.
const statusTimeout = 30 * time.Second

func runStatus(ctx context.Context, opts *statusOptions) error {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	st, err := client.New(opts.addr, client.WithToken(opts.token)).Status(ctx)
	if err != nil {
		return describe(opts.addr, "status", err)
	}
	if opts.json {
		enc := json.NewEncoder(opts.out)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	return printStatus(opts.out, st)
}

// printStatus writes st for a person.
func printStatus(w io.Writer, st client.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	oldest := "none"
	if st.Pending > 0 || st.OldestPendingAgeSeconds > 0 {
		oldest = humanAge(st.OldestPendingAgeSeconds)
	}
	fmt.Fprintf(tw, "sidecar:\t%s (version %s)\n", st.Sidecar, st.Version)
	fmt.Fprintf(tw, "pending:\t%d %s in %d %s\n", st.Pending, plural(st.Pending, "change", "changes"),
		st.PendingDocuments, plural(st.PendingDocuments, "document", "documents"))
	fmt.Fprintf(tw, "pinned:\t%s\n", humanBytes(st.PinnedBytes))
	fmt.Fprintf(tw, "oldest pending:\t%s\n", oldest)
	fmt.Fprintf(tw, "sidecars:\t%d; this one owns %d of %d partitions%s\n", st.Sidecars,
		len(st.OwnedPartitions), st.Partitions, partitionRanges(st.OwnedPartitions))
	fmt.Fprintf(tw, "dead letters:\t%d\n", st.DeadLetters)
	if s := st.Sessions; s != nil {
		line := fmt.Sprintf("%d pending in %d %s, %s pinned", s.Pending, s.Queues, plural(s.Queues, "queue", "queues"), humanBytes(s.PinnedBytes))
		if s.Pending > 0 {
			line += ", oldest " + humanAge(s.OldestPendingAgeSeconds)
		}
		if s.StoppedQueues > 0 {
			line += fmt.Sprintf("; %d stopped %s (writeback sessions deadletters list)", s.StoppedQueues, plural(s.StoppedQueues, "queue", "queues"))
		}
		fmt.Fprintf(tw, "sessions:\t%s\n", line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if len(st.Collections) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "COLLECTION\tSTORE\tTABLE\tPOLICY\tFALLBACK")
		for _, c := range st.Collections {
			fallback := "-"
			if c.WriteThroughFallback {
				fallback = "write-through (pinned memory over its limit)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, c.Store, c.Table, c.Policy, fallback)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	if len(st.DeadLetterList) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DEAD LETTER\tSEQ\tAT\tERROR")
		for _, d := range st.DeadLetterList {
			fmt.Fprintf(tw, "%s/%s\t%d\t%s\t%s\n", d.Collection, d.ID, d.Seq,
				d.At.UTC().Format(time.RFC3339), oneLine(d.Error))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if n := st.DeadLetters - int64(len(st.DeadLetterList)); n > 0 {
			fmt.Fprintf(w, "… and %d more\n", n)
		}
	}

	if len(st.Warnings) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "warnings:")
		for _, warn := range st.Warnings {
			fmt.Fprintf(w, "  - %s\n", oneLine(warn))
		}
	}
	return nil
}

// humanBytes writes n in binary units with one decimal: "512 B", "1.5 MiB".
func humanBytes(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	f := float64(n)
	for _, unit := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		f /= 1024
		if f < 1024 || unit == "PiB" {
			return strconv.FormatFloat(f, 'f', 1, 64) + " " + unit
		}
	}
	panic("unreachable")
}

// humanAge writes an age in seconds as a duration rounded to what matters.
func humanAge(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second))
	switch {
	case d < time.Second:
		d = d.Round(time.Millisecond)
	case d < time.Minute:
		d = d.Round(100 * time.Millisecond)
	default:
		d = d.Round(time.Second)
	}
	return d.String()
}

// partitionRanges writes partition numbers as " (0-31, 40)", or "" for none.
func partitionRanges(ps []int) string {
	if len(ps) == 0 {
		return ""
	}
	s := append([]int(nil), ps...)
	sort.Ints(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] <= s[j]+1 {
			j++
		}
		if s[i] == s[j] {
			parts = append(parts, strconv.Itoa(s[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", s[i], s[j]))
		}
		i = j + 1
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// oneLine keeps a table row on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
