//go:build unix

package testenv

import (
	"errors"
	"net"
	"syscall"
)

// ClosedByPeer reports whether c's peer has closed it: a peek at its
// socket, which leaves any data in place, reads the end of the stream.
func ClosedByPeer(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	_ = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = (n == 0 && err == nil) || errors.Is(err, syscall.ECONNRESET)
		return true
	})
	return closed
}
