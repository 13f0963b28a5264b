package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// listener is an http.Server bound to its port.
type listener struct {
	srv *http.Server
	ln  net.Listener
}

// listen binds every address first, so a port in use fails the start before
// anything serves.
func listen(servers ...*http.Server) ([]listener, error) {
	out := make([]listener, 0, len(servers))
	for _, srv := range servers {
		ln, err := net.Listen("tcp", srv.Addr)
		if err != nil {
			for _, l := range out {
				_ = l.ln.Close() // nothing was served on it yet
			}
			return nil, fmt.Errorf("listen on %s: %w", srv.Addr, err)
		}
		out = append(out, listener{srv: srv, ln: ln})
	}
	return out, nil
}

// serveUntil serves every listener until ctx ends or one fails, then shuts
// all down: stop accepting, let in-flight requests finish within timeout.
func serveUntil(ctx context.Context, ls []listener, timeout time.Duration, log *slog.Logger) error {
	failed := make(chan error, len(ls))
	for _, l := range ls {
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
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	errs := []error{runErr}
	for _, l := range ls {
		if err := l.srv.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown %s: %w", l.ln.Addr(), err))
		}
	}
	return errors.Join(errs...)
}
