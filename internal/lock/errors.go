package lock

import (
	"context"
	"errors"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// outcome is what the error of a call to Redis tells about the call. It is
// the one classification the package decides by: whether to clean up after
// a try, to distrust a renewal, to mark a RedLock instance slow, to fail
// fast or keep waiting.
type outcome uint8

const (
	// ran: no error; Redis ran the call and answered.
	ran outcome = iota
	// answeredNo: Redis answered with an error reply, or the script's owner
	// check failed (ErrLockLost). The call is over.
	answeredNo
	// refused: the connection was refused. The server is down, and the call
	// never ran.
	refused
	// noReply: the server did not answer in time (a read or dial deadline,
	// which go-redis reports as "i/o timeout"). The call may have run, or may
	// yet run; the server may be dead or only busy.
	noReply
	// deadline: the caller's context ran out, or no pooled connection came in
	// time. The call may have run; the client was waiting, not necessarily
	// the server.
	deadline
	// broken: the connection failed otherwise (EOF, reset, a context
	// cancelled mid-call). The call may have run.
	broken
)

// classify tells what err says about the call that returned it.
func classify(err error) outcome {
	var reply redis.Error
	var ne net.Error
	switch {
	case err == nil:
		return ran
	case errors.Is(err, ErrLockLost), errors.As(err, &reply):
		return answeredNo
	case errors.Is(err, syscall.ECONNREFUSED):
		return refused
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrPoolTimeout):
		return deadline
	case errors.As(err, &ne) && ne.Timeout():
		return noReply
	}
	return broken
}

// mayHaveRun reports a call that may have run in Redis, or may yet run (it
// can wait in a stalled server's input buffer), without an answer saying so.
func (o outcome) mayHaveRun() bool { return o >= noReply }

// heard reports a call Redis answered, either way.
func (o outcome) heard() bool { return o == ran || o == answeredNo }

// stalled reports a server that itself did not answer: it refused the
// connection or let a deadline of the call's own pass. A context that ended
// while the call waited for a pooled connection is not one: that queue is
// the client's.
func (o outcome) stalled() bool { return o == refused || o == noReply }

// busy reports a failure that may only mean load, not an outage: a RedLock
// waiter keeps trying through these, and fails fast on the rest.
func (o outcome) busy() bool { return o == noReply || o == deadline }
