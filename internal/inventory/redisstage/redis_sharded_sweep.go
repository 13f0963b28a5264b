package redisstage

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// redis-sharded's sweeper: when few units are left, it gathers them into
// the fullest bucket, so a buy of several units finds them in one place
// and the last units are not scattered one per bucket.
//
// A move crosses two buckets, which on a Cluster live on two shards, so it
// cannot be one script. It is written down first, in the item's journal
// (bucket 0's slot), then taken from its source and put into its
// destination, each half once under the move's id, then struck from the
// journal. A move cut between its halves (a crash, a lost connection)
// stays in the journal with its units out of every bucket, and whoever
// finds it finishes it: the next sweep, the reconcile job, or a buyer
// about to be refused. No half runs twice, so no unit is lost or doubled.
//
// A move breaks what the buyer's walk relies on, that an empty bucket with
// nothing in flight stays empty: a unit may move from a bucket the walk has
// not reached into one it has passed. So a walk that found every bucket
// short is not believed at once: the buyer finishes the moves in flight,
// walks again, and believes the second walk only if no move began during
// it (the number of moves begun did not change).

// Which items a sweeper looks at: only those whose buckets changed since a
// sweeper last swept them, never the catalogue. Every change that can
// scatter units (a take, a give-back, a reset, units put back by the
// reconcile job) is followed by a mark of the item in one hash of the kind,
// in a slot of its own, written as a command of its own (the buckets live
// on other shards of a Cluster). Every instance's sweeper reads the marks,
// sweeps those items, and clears each mark only if it is still the one it
// read, so a change that lands during the sweep keeps its mark for the
// next pass, on whichever instance. An idle item costs nothing, and an
// idle pass is one read. A mark that could not be written is kept in the
// instance's memory and swept by its own sweeper.

// sweepState is the sweeper's side of the stage.
type sweepState struct {
	sweeps, moved atomic.Int64
	// afterTake, when set, runs between the halves of a move (a test's
	// crash).
	afterTake func(move int64) error
	mu        sync.Mutex
	unmarked  map[int64]bool // items whose mark failed
}

// remember keeps item id for this instance's sweeper.
func (w *sweepState) remember(id int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.unmarked == nil {
		w.unmarked = map[int64]bool{}
	}
	w.unmarked[id] = true
}

// takeUnmarked returns the items remembered and forgets them: one marked
// after this is the next pass's.
func (w *sweepState) takeUnmarked() map[int64]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.unmarked
	w.unmarked = nil
	return m
}

// Sweeps counts the sweeps of this instance that moved units.
func (s *RedisSharded) Sweeps() int64 { return s.sw.sweeps.Load() }

// UnitsMoved counts the units this instance's sweeps moved.
func (s *RedisSharded) UnitsMoved() int64 { return s.sw.moved.Load() }

// moveKeys are item id's moves in flight and the number of moves begun,
// in bucket 0's slot.
func (s *RedisSharded) moveKeys(id int64) []string {
	p := s.bucketKeys(id, 0)[0]
	return []string{p + ":moves", p + ":moves-begun"}
}

// changedKeys are the kind's marks of changed items (item id -> mark) and
// the sequence the marks are taken from, in one slot of their own.
func (s *RedisSharded) changedKeys() []string {
	p := "seckill:{" + s.kind + ":sweep}:"
	return []string{p + "changed", p + "mark-seq"}
}

// changed marks item id for the sweepers, after its buckets changed. The
// change is done already, so a mark that fails is not the caller's error:
// it is remembered, and this instance's sweeper sweeps the item.
func (s *RedisSharded) changed(ctx context.Context, id int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := markChanged.Run(ctx, s.rdb, s.changedKeys(), id).Err(); err != nil {
		s.log.Warn("marking an item for the sweeper failed; this instance will sweep it", "kind", s.kind, "item", id, "err", err)
		s.sw.remember(id)
	}
}

// markedThen is a restock hook that marks the item for the sweepers, then
// calls f (if any): units back in the buckets may need gathering.
func (s *RedisSharded) markedThen(f func(ctx context.Context, id int64) error) func(ctx context.Context, id int64) error {
	return func(ctx context.Context, id int64) error {
		s.changed(ctx, id)
		if f == nil {
			return nil
		}
		return f(ctx, id)
	}
}

// SweepChanged sweeps (see Sweep) the items marked changed since a sweeper
// last swept them, and those whose mark this instance failed to write,
// each whatever became of the others. It clears the mark of each item
// swept without error, unless the item was marked again meanwhile, and
// returns the errors joined; an item whose sweep failed stays marked.
func (s *RedisSharded) SweepChanged(ctx context.Context, below int) error {
	local := s.sw.takeUnmarked()
	keys := s.changedKeys()
	marks, err := s.rdb.HGetAll(ctx, keys[0]).Result()
	if err != nil {
		err = fmt.Errorf("%w: read the changed %ss: %w", inventory.ErrUnavailable, s.kind, err)
	}
	errs := []error{err}
	for field, mark := range marks {
		id, perr := strconv.ParseInt(field, 10, 64)
		if perr == nil {
			delete(local, id)
			if _, err := s.Sweep(ctx, id, below); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		// A field that is no item id is cleared too, or it would stay.
		if err := clearChanged.Run(ctx, s.rdb, keys[:1], field, mark).Err(); err != nil {
			errs = append(errs, fmt.Errorf("%w: clear the mark of %s %s: %w", inventory.ErrUnavailable, s.kind, field, err))
		}
	}
	for id := range local {
		if _, err := s.Sweep(ctx, id, below); err != nil {
			errs = append(errs, err)
			s.sw.remember(id) // its mark is still missing
		}
	}
	return errors.Join(errs...)
}

// Sweep finishes item id's moves in flight and then, if its buckets hold
// at most below units in all and more than one holds some, moves them into
// the fullest. It returns the units moved, and fails with ErrUnavailable.
func (s *RedisSharded) Sweep(ctx context.Context, id int64, below int) (int, error) {
	if _, err := s.settleMoves(ctx, id); err != nil {
		return 0, err
	}
	snap, err := s.snapshot(ctx, id)
	if err != nil {
		return 0, err
	}
	total, to, holding := 0, 0, 0
	for b, v := range snap {
		if v[0] < 0 {
			return 0, nil // not loaded: nothing to gather
		}
		if v[0] > 0 {
			holding++
		}
		if v[0] > snap[to][0] {
			to = b
		}
		total += int(v[0])
	}
	if total > below || holding < 2 {
		return 0, nil
	}
	moved := 0
	for from, v := range snap {
		if from == to || v[0] <= 0 {
			continue
		}
		mid, err := moveBegin.Run(ctx, s.rdb, s.moveKeys(id), from, to, v[0]).Int64()
		if err != nil {
			return moved, fmt.Errorf("%w: begin a move of %s %d: %w", inventory.ErrUnavailable, s.kind, id, err)
		}
		n, err := s.finishMove(ctx, id, mid, from, to, int(v[0]))
		if err != nil {
			return moved, err
		}
		moved += n
	}
	if moved > 0 {
		s.sw.sweeps.Add(1)
		s.sw.moved.Add(int64(moved))
	}
	return moved, nil
}

// finishMove runs both halves of move mid (each at most once, however often
// it is called) and strikes it from the journal. It returns the units
// moved.
func (s *RedisSharded) finishMove(ctx context.Context, id, mid int64, from, to, units int) (int, error) {
	n, err := moveTake.Run(ctx, s.rdb, []string{s.bucketKeys(id, from)[0], s.bucketKeys(id, from)[0] + ":out"}, mid, units).Int()
	if err == nil && s.sw.afterTake != nil {
		err = s.sw.afterTake(mid)
	}
	if err == nil {
		err = movePut.Run(ctx, s.rdb, []string{s.bucketKeys(id, to)[0], s.bucketKeys(id, to)[0] + ":in"}, mid, n).Err()
	}
	if err == nil {
		err = s.rdb.HDel(ctx, s.moveKeys(id)[0], strconv.FormatInt(mid, 10)).Err()
	}
	if err != nil {
		return 0, fmt.Errorf("%w: move %d of %s %d (bucket %d to %d): %w", inventory.ErrUnavailable, mid, s.kind, id, from, to, err)
	}
	return n, nil
}

// settleMoves finishes item id's moves in flight and returns the number of
// moves begun, read when none was in flight.
func (s *RedisSharded) settleMoves(ctx context.Context, id int64) (int64, error) {
	for range 4 {
		v, err := moveState.Run(ctx, s.rdb, s.moveKeys(id)).Slice()
		if err != nil || len(v)%2 != 1 {
			return 0, fmt.Errorf("%w: moves of %s %d: %w", inventory.ErrUnavailable, s.kind, id, err)
		}
		begun, _ := v[0].(int64)
		if len(v) == 1 {
			return begun, nil
		}
		for i := 1; i < len(v); i += 2 {
			mid, _ := strconv.ParseInt(fmt.Sprint(v[i]), 10, 64)
			var from, to, units int
			if _, err := fmt.Sscanf(strings.ReplaceAll(fmt.Sprint(v[i+1]), "|", " "), "%d %d %d", &from, &to, &units); err != nil {
				return 0, fmt.Errorf("move %d of %s %d reads %q: %w", mid, s.kind, id, v[i+1], err)
			}
			if _, err := s.finishMove(ctx, id, mid, from, to, units); err != nil {
				return 0, err
			}
		}
	}
	return 0, fmt.Errorf("%w: moves of %s %d keep beginning", inventory.ErrUnavailable, s.kind, id)
}
