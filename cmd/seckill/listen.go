package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"
)

// listener is an http.Server bound to its port.
type listener struct {
	srv *http.Server
	ln  net.Listener
}

// listen binds every address first, so a port in use fails the start before
// anything serves. inUse says how to move to other ports, for the error.
func listen(inUse string, servers ...*http.Server) ([]listener, error) {
	out := make([]listener, 0, len(servers))
	for _, srv := range servers {
		ln, err := net.Listen("tcp", srv.Addr)
		if err != nil {
			for _, l := range out {
				_ = l.ln.Close() // nothing was served on it yet
			}
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, fmt.Errorf("listen on %s: %w: another program (or another demo) has this port; %s", srv.Addr, err, inUse)
			}
			return nil, fmt.Errorf("listen on %s: %w", srv.Addr, err)
		}
		out = append(out, listener{srv: srv, ln: ln})
	}
	return out, nil
}

// serveUntil serves every listener until ctx ends or one fails, then shuts
// all down: stop accepting, and let in-flight requests finish within
// timeout. Requests still running after that have their context cancelled,
// which ends lock waits and rolls back open transactions, and are given a
// short grace to release their locks and answer. Only then does serveUntil
// return, so the caller may close lock clients and databases safely.
func serveUntil(ctx context.Context, ls []listener, timeout time.Duration, log *slog.Logger) error {
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	failed := make(chan error, len(ls))
	for _, l := range ls {
		l.srv.BaseContext = func(net.Listener) context.Context { return base }
		go func(l listener) {
			if err := l.srv.Serve(l.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				failed <- fmt.Errorf("serve %s: %w", l.ln.Addr(), err)
			}
		}(l)
	}
	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", timeout)
	case runErr = <-failed:
		log.Error("server failed; shutting down", "err", runErr)
	}
	errs := []error{runErr}
	if err := shutdownAll(ctx, ls, timeout); err != nil {
		log.Warn("requests outlived the shutdown timeout; cancelling them", "timeout", timeout)
		cancelBase()
		if err := shutdownAll(ctx, ls, cancelGrace); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cancelGrace is how long cancelled requests get to release their locks.
const cancelGrace = 5 * time.Second

func shutdownAll(ctx context.Context, ls []listener, timeout time.Duration) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	var errs []error
	for _, l := range ls {
		if err := l.srv.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown %s: %w", l.ln.Addr(), err))
		}
	}
	return errors.Join(errs...)
}
