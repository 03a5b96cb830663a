//go:build linux || darwin || freebsd || netbsd || openbsd

package client

import (
	"net"
	"syscall"
)

// alive reports whether an idle connection is still open: nothing to read
// on it, as on any idle HTTP connection, and no end of stream. It peeks
// without blocking, one system call; net/http learns the same from the
// reader goroutine it keeps on every idle connection.
func alive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // done: do not wait for it to become readable
	})
	return err == nil && open
}
