//go:build unix

package testenv

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/testkit"
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

// KillIdleClients closes, on the server admin is a client of, every
// connection of the clients named names (KillClientsNamed), each of which
// must have had want; then it waits until every connection checked dialled
// has read the close, so that a check before use finds them all stale. It
// returns how many connections it closed.
func KillIdleClients(t testing.TB, admin *redis.Client, checked *CheckedDialer, want int, names ...string) int {
	t.Helper()
	killed := 0
	for _, name := range names {
		k := KillClientsNamed(t, admin, name)
		if k != want {
			t.Fatalf("closed %d connections of client %s, want its %d idle ones", k, name, want)
		}
		killed += k
	}
	for i, c := range checked.Conns() {
		testkit.Eventually(t, fmt.Sprintf("the close of checked connection %d seen by its socket", i), 30*time.Second, func() bool { return ClosedByPeer(c) })
	}
	return killed
}
