package store

import (
	"context"
	"errors"
	"net"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Isolable reports whether err, a store error outside the permanent list,
// may be caused by what was applied rather than by the store as a whole:
// the database server answered and refused the statement with an error
// that is not about connections, shutdowns, read-only mode, resources,
// privileges or contention — a trigger's RAISE EXCEPTION (PostgreSQL
// P0001) or SIGNAL (MySQL/MariaDB 1644), an index row too large (54000),
// a statement that ran out of its time (57014, 1969, 3024) …
//
// The appliers retry such errors with backoff like any other; only after
// maxRetries failed rounds do they split the batch to find what keeps
// failing, and only an isolable error may then dead-letter it. An error
// that is not isolable never does: the store being down or read-only
// would otherwise dead-letter everything.
func Isolable(err error) bool {
	if err == nil || IsPermanent(err) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pgIsolable(pe.Code)
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return !myStoreWide[me.Number]
	}
	var srv mongo.ServerError
	if errors.As(err, &srv) && !mongo.IsNetworkError(err) && !mongo.IsTimeout(err) {
		for code := range transientCodes {
			if srv.HasErrorCode(code) {
				return false
			}
		}
		return true
	}
	return false // a driver's or the network's error: nothing the data did
}

// pgIsolable reports whether a PostgreSQL error code may come from the
// data (see Isolable).
func pgIsolable(code string) bool {
	if len(code) != 5 || code == "42501" { // insufficient privilege: the store's setup
		return false
	}
	switch code[:2] {
	case "08", // connection exception
		"25", // invalid transaction state: read-only transaction (25006) …
		"28", // invalid authorization
		"3D", // invalid catalog name: the database is gone
		"40", // deadlock, serialization failure: contention
		"53", // insufficient resources: disk full, out of memory, too many connections
		"55", // object not in prerequisite state: lock not available (contention)
		"58", // system error
		"XX": // internal error
		return false
	case "57": // operator intervention: only a statement's timeout is the statement's
		return code == "57014"
	}
	return true
}

// myStoreWide are the MySQL/MariaDB server errors that say nothing about
// the data: the server refuses everyone, or contention (see Isolable).
var myStoreWide = map[uint16]bool{
	1021: true, // ER_DISK_FULL
	1037: true, // ER_OUTOFMEMORY
	1038: true, // ER_OUT_OF_SORTMEMORY
	1040: true, // ER_CON_COUNT_ERROR: too many connections
	1041: true, // ER_OUT_OF_RESOURCES
	1044: true, // ER_DBACCESS_DENIED_ERROR
	1045: true, // ER_ACCESS_DENIED_ERROR
	1053: true, // ER_SERVER_SHUTDOWN
	1142: true, // ER_TABLEACCESS_DENIED_ERROR
	1152: true, // ER_ABORTING_CONNECTION
	1153: true, // ER_NET_PACKET_TOO_LARGE
	1158: true, // ER_NET_READ_ERROR
	1159: true, // ER_NET_READ_INTERRUPTED
	1160: true, // ER_NET_ERROR_ON_WRITE
	1161: true, // ER_NET_WRITE_INTERRUPTED
	1184: true, // ER_NEW_ABORTING_CONNECTION
	1205: true, // ER_LOCK_WAIT_TIMEOUT: contention
	1213: true, // ER_LOCK_DEADLOCK: contention
	1290: true, // ER_OPTION_PREVENTS_STATEMENT: --read-only
	1792: true, // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
	1836: true, // ER_READ_ONLY_MODE
	1927: true, // ER_CONNECTION_KILLED (MariaDB)
	4031: true, // ER_CLIENT_INTERACTION_TIMEOUT (MySQL)
}
