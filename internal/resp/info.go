package resp

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/tidwall/redcon"
)

// commandList is commandTable in name order, for COMMAND's listings.
var commandList []*command

func init() {
	commandList = append(commandList, commandTable...)
	sort.Slice(commandList, func(i, k int) bool { return commandList[i].name < commandList[k].name })
}

// info is INFO's text: Redis's "# Section" and "field:value" lines, with
// writeback's status (as /v1/status reports it) in section "writeback".
func (s *Server) info(ctx context.Context, sections []string) (string, error) {
	want := map[string]bool{}
	all := len(sections) == 0
	for _, sec := range sections {
		switch sec {
		case "all", "everything", "default":
			all = true
		default:
			want[sec] = true
		}
	}
	var b strings.Builder
	line := func(k string, v any) { fmt.Fprintf(&b, "%s:%v\r\n", k, v) }
	section := func(name string, f func() error) error {
		if !all && !want[name] {
			return nil
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + strings.ToUpper(name[:1]) + name[1:] + "\r\n")
		return f()
	}
	_ = section("server", func() error {
		line("redis_version", redisVersion)
		line("redis_mode", "standalone")
		line("writeback_version", s.opt.Version)
		line("writeback_instance", s.opt.InstanceID)
		line("process_id", os.Getpid())
		line("uptime_in_seconds", int64(time.Since(s.start).Seconds()))
		return nil
	})
	_ = section("clients", func() error {
		line("connected_clients", s.clientCount())
		return nil
	})
	err := section("writeback", func() error {
		st, err := s.buf.Stats(ctx)
		if err != nil {
			return err
		}
		line("pending_changes", st.PendingChanges)
		line("pending_documents", st.PendingDocuments)
		line("pinned_bytes", st.PinnedBytes)
		line("oldest_pending_age_seconds", fmt.Sprintf("%.3f", st.OldestPending.Seconds()))
		line("dead_letters", st.DeadLetters)
		line("partitions", s.buf.Partitions())
		line("owned_partitions", len(s.app.Owned()))
		line("sidecars", s.app.Sidecars())
		colls := s.svc.Collections()
		names := make([]string, 0, len(colls))
		for n := range colls {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			c := colls[n]
			line("collection_"+n, fmt.Sprintf("store=%s,table=%s,policy=%s", c.StoreName, c.Table.Name, c.Policy))
		}
		return nil
	})
	return b.String(), err
}

// cmdCommand is COMMAND [COUNT | LIST | INFO name… | DOCS [name…]].
func cmdCommand(c *conn, j *job, args [][]byte) {
	if len(args) == 1 {
		b := redcon.AppendArray(nil, len(commandList))
		for _, cmd := range commandList {
			b = appendCommandInfo(b, cmd, j.proto)
		}
		j.reply(b)
		return
	}
	sub := strings.ToLower(string(args[1]))
	switch sub {
	case "count":
		if len(args) != 2 {
			j.fail(errArity("command|count"))
			return
		}
		j.reply(redcon.AppendInt(nil, int64(len(commandList))))
	case "list":
		b := redcon.AppendArray(nil, len(commandList))
		for _, cmd := range commandList {
			b = redcon.AppendBulkString(b, cmd.name)
		}
		j.reply(b)
	case "info":
		names := args[2:]
		list := commandList
		if len(names) > 0 {
			list = make([]*command, len(names))
			for i, n := range names {
				list[i], _ = lookup(n)
			}
		}
		b := redcon.AppendArray(nil, len(list))
		for _, cmd := range list {
			if cmd == nil {
				b = appendNull(b, j.proto)
				continue
			}
			b = appendCommandInfo(b, cmd, j.proto)
		}
		j.reply(b)
	case "docs":
		list := commandList
		if names := args[2:]; len(names) > 0 {
			list = nil
			for _, n := range names {
				if cmd, ok := lookup(n); ok {
					list = append(list, cmd)
				}
			}
		}
		b := appendMap(nil, len(list), j.proto)
		for _, cmd := range list {
			b = redcon.AppendBulkString(b, cmd.name)
			b = appendCommandDoc(b, cmd, j.proto)
		}
		j.reply(b)
	default:
		j.fail(errUnknownSubcommand(args[1], "command"))
	}
}

// appendCommandInfo is a command's entry in COMMAND INFO, in Redis 7's
// ten-element form (without key specifications).
func appendCommandInfo(b []byte, cmd *command, proto int) []byte {
	b = redcon.AppendArray(b, 10)
	b = redcon.AppendBulkString(b, cmd.name)
	b = redcon.AppendInt(b, int64(cmd.arity))
	b = appendSet(b, len(cmd.flags), proto)
	for _, f := range cmd.flags {
		b = redcon.AppendString(b, f)
	}
	b = redcon.AppendInt(b, int64(cmd.keys[0]))
	b = redcon.AppendInt(b, int64(cmd.keys[1]))
	b = redcon.AppendInt(b, int64(cmd.keys[2]))
	b = appendSet(b, len(cmd.acl), proto)
	for _, a := range cmd.acl {
		b = redcon.AppendString(b, a)
	}
	b = appendSet(b, 0, proto) // tips
	b = appendSet(b, 0, proto) // key specifications
	return appendSet(b, 0, proto)
}

// appendCommandDoc is a command's entry in COMMAND DOCS.
func appendCommandDoc(b []byte, cmd *command, proto int) []byte {
	d := cmd.doc
	n := 4
	if len(d.args) > 0 {
		n++
	}
	b = appendMap(b, n, proto)
	for _, kv := range [][2]string{{"summary", d.summary}, {"since", d.since}, {"group", d.group}, {"complexity", d.complexity}} {
		b = redcon.AppendBulkString(b, kv[0])
		b = redcon.AppendBulkString(b, kv[1])
	}
	if len(d.args) > 0 {
		b = redcon.AppendBulkString(b, "arguments")
		b = appendArgDocs(b, d.args, proto)
	}
	return b
}

func appendArgDocs(b []byte, args []argDoc, proto int) []byte {
	b = redcon.AppendArray(b, len(args))
	for _, a := range args {
		n := 2
		if len(a.flags) > 0 {
			n++
		}
		if len(a.args) > 0 {
			n++
		}
		b = appendMap(b, n, proto)
		b = redcon.AppendBulkString(b, "name")
		b = redcon.AppendBulkString(b, a.name)
		b = redcon.AppendBulkString(b, "type")
		b = redcon.AppendBulkString(b, a.typ)
		if len(a.flags) > 0 {
			b = redcon.AppendBulkString(b, "flags")
			b = appendSet(b, len(a.flags), proto)
			for _, f := range a.flags {
				b = redcon.AppendString(b, f)
			}
		}
		if len(a.args) > 0 {
			b = redcon.AppendBulkString(b, "arguments")
			b = appendArgDocs(b, a.args, proto)
		}
	}
	return b
}
