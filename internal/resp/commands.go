package resp

import (
	"context"
	"crypto/subtle"
	"fmt"
	"strings"

	"github.com/tidwall/redcon"
)

// command is one supported command: its Redis metadata (COMMAND INFO and
// COMMAND DOCS report it) and how to prepare it.
type command struct {
	name   string
	arity  int    // Redis's: n exactly, -n at least n (the name included)
	family string // metrics op label
	flags  []string
	keys   [3]int // first key, last key, step
	acl    []string
	noAuth bool // allowed before AUTH
	doc    commandDoc
	// prepare answers the command or says what it still has to do (see
	// job); args[0] is the command's name.
	prepare func(c *conn, j *job, args [][]byte)
}

// commandDoc is what COMMAND DOCS says about a command.
type commandDoc struct {
	summary, since, group, complexity string
	args                              []argDoc
}

type argDoc struct {
	name, typ string
	flags     []string // optional, multiple
	args      []argDoc // of a block
}

// Metrics op labels of the Redis commands (docs/api.md).
const (
	famHGet    = "hget"    // HGET HMGET HGETALL HEXISTS HLEN
	famHSet    = "hset"    // HSET HMSET
	famHDel    = "hdel"    // HDEL
	famHIncrBy = "hincrby" // HINCRBY HINCRBYFLOAT
	famDel     = "del"     // DEL
	famExists  = "exists"  // EXISTS
	famConn    = "connection"
	famServer  = "server"
	famOther   = "other" // unknown commands, protocol errors
)

// commands is the command table, by lower-case name; set up in init
// because the handlers refer to it (COMMAND).
var commands map[string]*command

// lookup finds a command by its name in any case, without allocating for
// short names.
func lookup(name []byte) (*command, bool) {
	var buf [24]byte
	if len(name) > len(buf) {
		return nil, false
	}
	for i, ch := range name {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		buf[i] = ch
	}
	cmd, ok := commands[string(buf[:len(name)])]
	return cmd, ok
}

// prepare turns a command into a job: answered already, or with what it
// still has to do (schedule starts it).
func (c *conn) prepare(args [][]byte) *job {
	j := c.newJob(famOther)
	cmd, ok := lookup(args[0])
	switch {
	case !ok:
		j.fail(errUnknownCommand(args))
	case cmd.arity > 0 && len(args) != cmd.arity, cmd.arity < 0 && len(args) < -cmd.arity:
		j.op = cmd.family
		j.fail(errArity(cmd.name))
	case c.s.opt.Token != "" && !c.authed && !cmd.noAuth:
		j.op = cmd.family
		j.fail(errNoAuth)
	default:
		j.op = cmd.family
		cmd.prepare(c, j, args)
	}
	if j.answered() {
		c.finish(j)
	}
	return j
}

// ok is the +OK reply.
var ok = []byte("+OK\r\n")

// Connection commands: they change or report the connection's state, which
// only the reader touches, so they run when read, in order.

func cmdPing(c *conn, j *job, args [][]byte) {
	switch len(args) {
	case 1:
		j.reply([]byte("+PONG\r\n"))
	case 2:
		j.reply(redcon.AppendBulk(nil, args[1]))
	default:
		j.fail(errArity("ping"))
	}
}

func cmdEcho(c *conn, j *job, args [][]byte) { j.reply(redcon.AppendBulk(nil, args[1])) }

func cmdQuit(c *conn, j *job, args [][]byte) {
	j.reply(ok)
	j.close = true
}

func cmdSelect(c *conn, j *job, args [][]byte) {
	n, isInt := parseInt(args[1])
	switch {
	case !isInt:
		j.fail(errNotInteger)
	case n != 0:
		// The sidecar has one keyspace: collections.
		j.fail(errf(400, "ERR DB index is out of range"))
	default:
		j.reply(ok)
	}
}

// authenticate checks a user and token as Redis's default user would.
func (c *conn) authenticate(user, pass []byte) *respError {
	if user != nil && string(user) != "default" {
		return errWrongPass
	}
	if subtle.ConstantTimeCompare(pass, []byte(c.s.opt.Token)) != 1 {
		return errWrongPass
	}
	c.authed = true
	return nil
}

func cmdAuth(c *conn, j *job, args [][]byte) {
	var user, pass []byte
	switch len(args) {
	case 2:
		pass = args[1]
	case 3:
		user, pass = args[1], args[2]
	default:
		j.fail(errSyntax)
		return
	}
	if c.s.opt.Token == "" {
		if user == nil {
			j.fail(errf(400, "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"))
			return
		}
		// Redis's default user without a password takes any password.
		if string(user) != "default" {
			j.fail(errWrongPass)
			return
		}
		j.reply(ok)
		return
	}
	if e := c.authenticate(user, pass); e != nil {
		j.fail(e)
		return
	}
	j.reply(ok)
}

// cmdHello is HELLO [protover [AUTH user pass] [SETNAME name]].
func cmdHello(c *conn, j *job, args [][]byte) {
	proto := c.proto
	if len(args) > 1 {
		n, isInt := parseInt(args[1])
		if !isInt {
			j.fail(errf(400, "ERR Protocol version is not an integer or out of range"))
			return
		}
		if n != 2 && n != 3 {
			j.fail(errf(400, "NOPROTO unsupported protocol version"))
			return
		}
		proto = int(n)
	}
	var user, pass, name []byte
	for i := 2; i < len(args); i++ {
		more := len(args) - i - 1
		switch opt := strings.ToLower(string(args[i])); {
		case opt == "auth" && more >= 2:
			user, pass = args[i+1], args[i+2]
			i += 2
		case opt == "setname" && more >= 1:
			name = args[i+1]
			i++
		default:
			j.fail(errf(400, "ERR Syntax error in HELLO option '%.128s'", args[i]))
			return
		}
	}
	if pass != nil {
		if c.s.opt.Token == "" {
			if string(user) != "default" {
				j.fail(errWrongPass)
				return
			}
		} else if e := c.authenticate(user, pass); e != nil {
			j.fail(e)
			return
		}
	}
	if c.s.opt.Token != "" && !c.authed {
		j.fail(errf(401, "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"))
		return
	}
	if name != nil {
		if !validClientName(name) {
			j.fail(errBadClientName)
			return
		}
		c.name = string(name)
	}
	c.proto = proto
	b := appendMap(nil, 7, proto)
	b = redcon.AppendBulkString(b, "server")
	b = redcon.AppendBulkString(b, "redis")
	b = redcon.AppendBulkString(b, "version")
	b = redcon.AppendBulkString(b, redisVersion)
	b = redcon.AppendBulkString(b, "proto")
	b = redcon.AppendInt(b, int64(proto))
	b = redcon.AppendBulkString(b, "id")
	b = redcon.AppendInt(b, c.id)
	b = redcon.AppendBulkString(b, "mode")
	b = redcon.AppendBulkString(b, "standalone")
	b = redcon.AppendBulkString(b, "role")
	b = redcon.AppendBulkString(b, "master")
	b = redcon.AppendBulkString(b, "modules")
	b = redcon.AppendArray(b, 0)
	j.reply(b)
}

// redisVersion is the Redis version HELLO and INFO report, so that clients
// enable what they know Redis 7 has (RESP3); INFO also names writeback.
const redisVersion = "7.0.0"

var errBadClientName = errf(400, "ERR Client names cannot contain spaces, newlines or special characters.")

func validClientName(name []byte) bool {
	for _, ch := range name {
		if ch < '!' || ch > '~' {
			return false
		}
	}
	return true
}

func cmdReset(c *conn, j *job, args [][]byte) {
	c.proto, c.name, c.lib = 2, "", [2]string{}
	if c.s.opt.Token != "" {
		c.authed = false
	}
	j.proto = 2
	j.reply([]byte("+RESET\r\n"))
}

func cmdClient(c *conn, j *job, args [][]byte) {
	sub := strings.ToLower(string(args[1]))
	arity := func(n int) bool {
		if len(args) != n {
			j.fail(errArity("client|" + sub))
			return false
		}
		return true
	}
	switch sub {
	case "setname":
		if !arity(3) {
			return
		}
		if !validClientName(args[2]) {
			j.fail(errBadClientName)
			return
		}
		c.name = string(args[2])
		j.reply(ok)
	case "getname":
		if !arity(2) {
			return
		}
		if c.name == "" {
			j.reply(appendNull(nil, j.proto))
			return
		}
		j.reply(redcon.AppendBulkString(nil, c.name))
	case "id":
		if arity(2) {
			j.reply(redcon.AppendInt(nil, c.id))
		}
	case "setinfo":
		if !arity(4) {
			return
		}
		v := string(args[3])
		if strings.ContainsAny(v, " \r\n") {
			j.fail(errf(400, "ERR %s cannot contain spaces, newlines or special characters.", strings.ToLower(string(args[2]))))
			return
		}
		switch strings.ToLower(string(args[2])) {
		case "lib-name":
			c.lib[0] = v
		case "lib-ver":
			c.lib[1] = v
		default:
			j.fail(errf(400, "ERR Unrecognized option '%.128s'", args[2]))
			return
		}
		j.reply(ok)
	case "info":
		if arity(2) {
			j.reply(appendVerbatim(nil, c.describe()+"\n", j.proto))
		}
	default:
		j.fail(errUnknownSubcommand(args[1], "client"))
	}
}

// describe is the connection's line of CLIENT INFO, in Redis's format.
func (c *conn) describe() string {
	return fmt.Sprintf("id=%d addr=%s laddr=%s fd=0 name=%s db=0 resp=%d lib-name=%s lib-ver=%s",
		c.id, c.addr, localAddr(c.nc.LocalAddr()), c.name, c.proto, c.lib[0], c.lib[1])
}

// cmdInfo reads the buffer's counters, so it runs like a data command.
func cmdInfo(c *conn, j *job, args [][]byte) {
	sections := make([]string, 0, len(args)-1)
	for _, a := range args[1:] {
		sections = append(sections, strings.ToLower(string(a)))
	}
	j.run = func(ctx context.Context, j *job) {
		text, err := c.s.info(ctx, sections)
		if err != nil {
			j.fail(c.s.toRESP(err))
			return
		}
		j.reply(appendVerbatim(nil, text, j.proto))
	}
}

func init() {
	commands = map[string]*command{}
	for _, cmd := range commandTable {
		commands[cmd.name] = cmd
	}
}
