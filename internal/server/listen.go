package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/writeback/writeback/internal/config"
)

// listen listens on addr: a TCP host:port or, for "unix:<path>", a Unix
// socket at path (config.UnixSocket) with the permissions perm, when set
// (resp.socketMode; otherwise the umask's).
//
// A socket file left at path by a sidecar that did not shut down (killed,
// or its node lost power) is replaced: nothing answers on it. One that
// another process still listens on, or a file that is not a socket, is an
// error: replacing it would take the address from a running sidecar or
// delete someone's file. Closing the listener removes the socket file.
func listen(addr string, perm fs.FileMode, setPerm bool) (net.Listener, error) {
	path, unix := config.UnixSocket(addr)
	if !unix {
		return net.Listen("tcp", addr)
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	case fi.Mode().Type() != fs.ModeSocket:
		return nil, fmt.Errorf("%s exists and is not a socket", path)
	default:
		c, err := net.DialTimeout("unix", path, time.Second)
		switch {
		case err == nil:
			c.Close()
			return nil, fmt.Errorf("another process listens on %s", path)
		case !errors.Is(err, syscall.ECONNREFUSED):
			// A full backlog, say: someone may still listen there.
			return nil, fmt.Errorf("cannot tell whether another process listens on %s (%v)", path, err)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("remove the stale socket: %v", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil || !setPerm {
		return ln, err
	}
	// Until the chmod the socket has the umask's permissions: at most
	// fewer clients could connect, never more.
	if err := os.Chmod(path, perm); err != nil {
		ln.Close()
		return nil, fmt.Errorf("set the socket's permissions: %v", err)
	}
	return ln, nil
}

// listenAddr is the address ln listens on, as the configuration writes it:
// host:port, or unix:<path> for a Unix socket.
func listenAddr(ln net.Listener) string {
	if a, ok := ln.Addr().(*net.UnixAddr); ok {
		return "unix:" + a.Name
	}
	return ln.Addr().String()
}
