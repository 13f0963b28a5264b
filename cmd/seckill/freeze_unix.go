//go:build unix

package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// freezeProcess returns the hook of SECKILL_FREEZE_BEFORE_FENCED_WRITE
// (store.Pool.FreezeFencedWrite): it stops this whole process with
// SIGSTOP, as a long GC pause or a frozen VM would, with the write of a
// lock holder's fenced batch not yet sent and every check of its lease
// behind it. Whoever sends SIGCONT lets the write go; the log says it went
// out, so the chaos suite knows that MySQL had the stale write to refuse.
//
// The write waits for the SIGCONT, not only for kill to return: a process
// stops when one of its threads takes the SIGSTOP, and the thread that sent
// it can run on meanwhile (the write went out before the stop, now and
// then, when it did not wait).
func freezeProcess(log *slog.Logger) (func(send func() (int, error)) (int, error), error) {
	return func(send func() (int, error)) (int, error) {
		cont := make(chan os.Signal, 1)
		signal.Notify(cont, syscall.SIGCONT)
		defer signal.Stop(cont)
		log.Warn("freezing before a fenced stock write (SECKILL_FREEZE_BEFORE_FENCED_WRITE)", "pid", os.Getpid())
		if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err != nil {
			log.Error("freezing failed", "err", err)
		} else {
			<-cont
		}
		n, err := send()
		log.Warn("the frozen fenced write went out", "bytes", n, "err", err)
		return n, err
	}, nil
}
