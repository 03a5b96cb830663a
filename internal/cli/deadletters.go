package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/writeback/writeback/pkg/client"
)

type deadLettersOptions struct {
	lookupEnv LookupEnv
	addr      string
	token     string
	limit     int
	sel       client.DeadLetterAction
	out       io.Writer
}

// NewCmdDeadLetters builds "writeback deadletters list|replay|drop".
func NewCmdDeadLetters(lookupEnv LookupEnv) *cobra.Command {
	opts := &deadLettersOptions{lookupEnv: lookupEnv}
	cmd := &cobra.Command{
		Use:   "deadletters",
		Short: "List, replay or drop buffered changes the store rejected",
		Long: `Dead letters are buffered changes the store rejected for good (a constraint,
a value out of range …), kept with the store's error. List them; once the
cause is fixed, replay them (their changes are buffered again as new writes);
or drop them for good.`,
	}
	list := &cobra.Command{
		Use:   "list [--limit N]",
		Short: "List dead letters with their errors",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.out = cmd.OutOrStdout()
			if err := completeClient(cmd, opts.lookupEnv, &opts.token); err != nil {
				return usageError(err)
			}
			return failed(runDeadList(cmd.Context(), opts))
		},
	}
	list.Flags().IntVar(&opts.limit, "limit", 100, "list at most this many")
	addClientFlags(list, &opts.addr, &opts.token)
	addAdminFlag(list)
	cmd.AddCommand(list)
	for _, action := range []string{"replay", "drop"} {
		short := map[string]string{"replay": "Buffer dead letters' changes again, after fixing their cause", "drop": "Remove dead letters for good"}[action]
		c := &cobra.Command{
			Use:   action + " (--collection C --id ID --seq N | --all)",
			Short: short,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				opts.out = cmd.OutOrStdout()
				if err := completeClient(cmd, opts.lookupEnv, &opts.token); err != nil {
					return usageError(err)
				}
				if !opts.sel.All && (opts.sel.Collection == "" || opts.sel.ID == "" || opts.sel.Seq <= 0) {
					return usageError(errors.New("name one dead letter with --collection, --id and --seq, or all of them with --all"))
				}
				return failed(runDeadAction(cmd.Context(), opts, action))
			},
		}
		c.Flags().StringVar(&opts.sel.Collection, "collection", "", "the dead letter's collection")
		c.Flags().StringVar(&opts.sel.ID, "id", "", "the dead letter's document id")
		c.Flags().Int64Var(&opts.sel.Seq, "seq", 0, "the dead letter's sequence number")
		c.Flags().BoolVar(&opts.sel.All, "all", false, "every dead letter")
		addClientFlags(c, &opts.addr, &opts.token)
		addAdminFlag(c)
		cmd.AddCommand(c)
	}
	return cmd
}

const deadLettersTimeout = 60 * time.Second

func runDeadList(ctx context.Context, opts *deadLettersOptions) error {
	ctx, cancel := context.WithTimeout(ctx, deadLettersTimeout)
	defer cancel()
	dls, err := client.New(opts.addr, client.WithToken(opts.token)).DeadLetters(ctx, opts.limit)
	if err != nil {
		return describe(opts.addr, "dead letters", err)
	}
	rows := make([]string, len(dls))
	for i, d := range dls {
		rows[i] = fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s", d.Collection, d.ID, d.Seq, d.At.Format(time.RFC3339), d.Error, d.Change)
	}
	return printTable(opts.out, "no dead letters", "COLLECTION\tID\tSEQ\tAT\tERROR\tCHANGE", rows)
}

// printTable prints tab-separated rows under header as aligned columns, or
// empty when there are none.
func printTable(out io.Writer, empty, header string, rows []string) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(out, empty)
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	return tw.Flush()
}

func runDeadAction(ctx context.Context, opts *deadLettersOptions, action string) error {
	ctx, cancel := context.WithTimeout(ctx, deadLettersTimeout)
	defer cancel()
	c := client.New(opts.addr, client.WithToken(opts.token))
	do := c.ReplayDeadLetters
	if action == "drop" {
		do = c.DropDeadLetters
	}
	n, err := do(ctx, opts.sel)
	if err != nil {
		return describe(opts.addr, action, err)
	}
	verb := map[string]string{"replay": "replayed", "drop": "dropped"}[action]
	fmt.Fprintf(opts.out, "%s %d dead %s\n", verb, n, plural(int64(n), "letter", "letters"))
	return nil
}
