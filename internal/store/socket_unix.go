//go:build unix

package store

import (
	"net"
	"syscall"
)

// socketOpen reads one byte from c's socket without waiting, as the MySQL
// driver's own liveness check does: nothing to read means open; the end
// of the stream (the server closed it), a byte nobody asked for, or an
// error means it cannot carry a statement. A connection that is not a
// socket of the system's (a test's wrapper) counts as open.
func socketOpen(c net.Conn) bool {
	if u, ok := c.(interface{ Unwrap() net.Conn }); ok {
		c = u.Unwrap()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, err := syscall.Read(int(fd), b[:])
		open = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && open
}
