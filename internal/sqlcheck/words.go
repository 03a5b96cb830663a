package sqlcheck

// The allow-lists of a session statement. Anything not here, in the
// grammar of dml.go, is refused.

// functions are the functions a session statement may call, by their
// unquoted, unqualified name: pure ones over its own row and arguments.
var functions = map[string]bool{
	"coalesce": true, "nullif": true, "greatest": true, "least": true, "abs": true, "round": true,
	"floor": true, "ceil": true, "ceiling": true, "mod": true, "sign": true, "trunc": true, "truncate": true,
	"lower": true, "upper": true, "length": true, "char_length": true, "concat": true, "substring": true, "substr": true,
	"trim": true, "ltrim": true, "rtrim": true, "replace": true, "convert": true,
	"now": true, "current_timestamp": true, "current_date": true, "localtimestamp": true, "utc_timestamp": true,
	"jsonb_set": true, "json_set": true, "jsonb_insert": true, "json_insert": true, "json_replace": true,
	"json_array_append": true, "json_remove": true, "to_jsonb": true, "jsonb_build_object": true, "json_object": true,
	"json_array": true, "jsonb_build_array": true,
	"row": true,
}

// niladic are the functions a statement may name without parentheses.
var niladic = map[string]bool{
	"current_timestamp": true, "current_date": true, "localtimestamp": true, "current_time": true, "localtime": true,
}

// types are the type names of casts (x::type, CAST(x AS type)); some are
// followed by a second word (double precision, character varying,
// timestamp with time zone, signed integer).
var types = map[string]bool{
	"int": true, "integer": true, "bigint": true, "smallint": true, "int2": true, "int4": true, "int8": true,
	"numeric": true, "decimal": true, "real": true, "double": true, "float": true, "float4": true, "float8": true,
	"text": true, "varchar": true, "char": true, "character": true, "boolean": true, "bool": true,
	"date": true, "time": true, "timestamp": true, "timestamptz": true, "datetime": true,
	"json": true, "jsonb": true, "uuid": true, "bytea": true, "binary": true,
	"signed": true, "unsigned": true,
}

// refused are words no session statement may contain, with what to do
// instead; the parser would refuse them anyway, with a vaguer sentence.
var refused = map[string]string{
	"select":    "subqueries are not allowed; pass the values the statement needs as arguments",
	"from":      "other tables are not allowed (FROM); a session statement changes one declared table",
	"join":      "joins are not allowed; a session statement changes one declared table",
	"using":     "USING is not allowed; a session statement changes one declared table",
	"into":      "only INSERT INTO names a table",
	"with":      "WITH is not allowed",
	"table":     "TABLE is not allowed",
	"union":     "UNION is not allowed",
	"returning": "RETURNING is pointless in a session: its statements run later, on an applier",
	"call":      "CALL is not allowed",
	"lock":      "LOCK is not allowed",
	"outfile":   "OUTFILE is not allowed",
	"dumpfile":  "DUMPFILE is not allowed",
	"array":     "arrays are not allowed; pass the value as an argument",
	"exists":    "subqueries are not allowed; pass the values the statement needs as arguments",
	// Niladic functions that read the session's identity or settings.
	// A column of one of these names must be quoted.
	"user": identity, "current_user": identity, "session_user": identity, "current_role": identity,
	"system_user": identity, "current_schema": identity, "current_catalog": identity,
}

const identity = "the session's identity is not a value a statement may use; quote a column of this name"

// reserved are words that are never a column or an alias unquoted: the
// grammar's keywords.
var reserved = map[string]bool{
	"and": true, "or": true, "not": true, "is": true, "null": true, "true": true, "false": true, "unknown": true,
	"in": true, "between": true, "like": true, "ilike": true, "case": true, "when": true, "then": true, "else": true,
	"end": true, "cast": true, "as": true, "on": true, "set": true, "where": true, "values": true, "default": true,
	"order": true, "by": true, "limit": true, "distinct": true, "all": true, "any": true, "some": true,
	"interval": true, "collate": true, "escape": true, "xor": true, "div": true, "group": true, "having": true,
	"insert": true, "update": true, "delete": true, "do": true, "asc": true, "desc": true, "only": true,
	"binary": true, "variadic": true, "operator": true, "over": true, "window": true, "filter": true,
}

// operators are the binary operators an expression may use.
var operators = map[string]bool{
	"+": true, "-": true, "*": true, "/": true, "%": true, "||": true,
	"=": true, "<": true, ">": true, "<=": true, ">=": true, "<>": true, "!=": true,
}
