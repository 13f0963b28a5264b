//go:build !unix

package main

import (
	"errors"
	"log/slog"
)

// freezeProcess: a process stops itself with SIGSTOP only on unix.
func freezeProcess(*slog.Logger) (func(send func() (int, error)) (int, error), error) {
	return nil, errors.New("stopping the process needs SIGSTOP, which this system lacks")
}
