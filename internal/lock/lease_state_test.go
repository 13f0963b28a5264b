package lock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/lock"
)

// A Release that comes while the lease's loss is being reported (the Lost
// hook is running) must report the loss, not a clean release, even if the
// key, lost by the clock, was still in Redis and the release deleted it.
// The hook holds on until that Release has returned, or for half a second
// if the Release waits for the hook (as it should).
func TestReleaseWhileTheLossIsReported(t *testing.T) {
	t.Parallel()
	hookIn := make(chan struct{})
	releaseReturned := make(chan struct{})
	rdb := testRedis(t)
	var prefix string
	c, prefix := newClient(t, rdb, lock.Options{Hooks: lock.Hooks{Lost: func(key string, _ error) {
		// Redis keeps the key longer than the lease trusted it.
		rdb.PExpire(context.Background(), lockKey(prefix, key), 10*time.Second)
		close(hookIn)
		select {
		case <-releaseReturned:
		case <-time.After(500 * time.Millisecond):
		}
	}}})
	ctx := context.Background()
	l := mustObtain(t, c, ctx, "k", 100*time.Millisecond, lock.ObtainOptions{Fixed: true})
	<-hookIn
	var err error
	go func() {
		err = l.Release(ctx)
		close(releaseReturned)
	}()
	<-releaseReturned
	if !errors.Is(err, lock.ErrLockLost) || !errors.Is(l.Err(), lock.ErrLockLost) {
		t.Fatalf("Release during the Lost hook returned %v and left Err %v; want the loss from both", err, l.Err())
	}
	if !isClosed(l.Done()) {
		t.Fatal("Done is open after Release")
	}
}

const pauseChildEnv = "SECKILL_LOCK_PAUSE_CHILD"

// A holder stopped with SIGSTOP past its lease (while another client takes
// the lock) must not see its lease as healthy for a single check after it
// resumes. The holder is a child process with GOMAXPROCS=1 that spins on
// Err and Context().Err(), so after SIGCONT it keeps checking before the
// lease's timer gets a chance to run.
func TestPausedHolderSeesLossOnResume(t *testing.T) {
	if prefix := os.Getenv(pauseChildEnv); prefix != "" {
		runPausedHolder(t, prefix)
		return
	}
	t.Parallel()
	rdb := testRedis(t)
	prefix := testPrefix(t, rdb)
	cmd := exec.Command(os.Args[0], "-test.run=^TestPausedHolderSeesLossOnResume$", "-test.count=1", "-test.v")
	cmd.Env = append(sameRedis(rdb), pauseChildEnv+"="+prefix, "GOMAXPROCS=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := bufio.NewScanner(out)
	var log []string
	waitFor := func(prefix string) string {
		for lines.Scan() {
			log = append(log, lines.Text())
			if strings.HasPrefix(lines.Text(), prefix) {
				return lines.Text()
			}
		}
		t.Fatalf("the holder exited before %q:\n%s", prefix, strings.Join(log, "\n"))
		return ""
	}
	waitFor("holding")
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// While the holder is stopped its lease runs out and we take the lock.
	other, _ := newClient(t, rdb, lock.Options{Prefix: prefix})
	taken := mustObtain(t, other, context.Background(), "k", 10*time.Second, lock.ObtainOptions{Wait: 30 * time.Second})
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	result := waitFor("checks")
	for lines.Scan() {
		log = append(log, lines.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("holder process: %v\n%s", err, strings.Join(log, "\n"))
	}
	var checks, stale int
	if _, err := fmt.Sscanf(result, "checks %d stale %d", &checks, &stale); err != nil {
		t.Fatalf("holder said %q: %v", result, err)
	}
	t.Logf("after resuming, the holder checked its lease %d times", checks)
	if stale != 0 {
		t.Fatalf("%d checks after the validity deadline still reported the lease healthy (while we held the lock)", stale)
	}
	mustRelease(t, taken)
}

func runPausedHolder(t *testing.T, prefix string) {
	rdb := testRedis(t)
	c := mustNew(t, rdb, lock.Options{Prefix: prefix})
	l := mustObtain(t, c, context.Background(), "k", 300*time.Millisecond, lock.ObtainOptions{})
	lctx := l.Context()
	fmt.Println("holding")
	var checks, stale int
	// The parent takes the lock over within seconds of the pause; a lease
	// still healthy a minute on means the two never shared a Redis.
	giveUp := time.Now().Add(time.Minute)
	for {
		now := time.Now()
		if now.After(giveUp) {
			t.Fatalf("the lease was never lost after %d checks: is the parent on the same Redis?", checks)
		}
		err, cerr := l.Err(), lctx.Err()
		checks++
		if !now.Before(l.Deadline()) && (err == nil || cerr == nil) {
			stale++
		}
		if err != nil && cerr != nil {
			break
		}
	}
	fmt.Printf("checks %d stale %d\n", checks, stale)
	if stale != 0 {
		t.Errorf("%d stale checks", stale)
	}
	if err := l.Release(context.Background()); !errors.Is(err, lock.ErrLockLost) {
		t.Errorf("release after the pause: %v, want ErrLockLost", err)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
}
