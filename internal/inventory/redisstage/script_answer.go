package redisstage

import (
	"fmt"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// What the stock scripts (reserve.lua for redis-atomic, enqueue.lua for
// redis-stream) answer: the units left, or a refusal's code, which
// redis-atomic turns into the error both stages return.

// scriptAnswer reads the answer of reserve.lua or enqueue.lua: the stock
// left or a refusal's code, or {code, ms} for a code that comes with a
// time (refusal.lua).
func scriptAnswer(v any, err error) (int64, time.Duration, error) {
	if err != nil {
		return 0, 0, err
	}
	switch v := v.(type) {
	case int64:
		return v, 0, nil
	case []any:
		if len(v) == 2 {
			code, ok1 := v[0].(int64)
			ms, ok2 := v[1].(int64)
			if ok1 && ok2 {
				return code, time.Duration(ms) * time.Millisecond, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("a script answered %v", v)
}

// refusal is the error of refusal.lua's code (with its ms, if any).
func (s *RedisAtomic) refusal(id int64, code int64, ms time.Duration) error {
	switch code {
	case -1:
		if ms != 0 {
			return inventory.SoldOutAt(inventory.WindowAt{Closes: true, ClosesIn: ms}, inventory.ErrSoldOut)
		}
		return inventory.ErrSoldOut
	case -2:
		return fmt.Errorf("%s %d: %w", s.kind, id, inventory.ErrNotFound)
	case -3:
		return inventory.ErrAlreadyPurchased
	case -4:
		return fmt.Errorf("%w: %w", inventory.ErrSoldOut, inventory.ErrMayReturn)
	case -6:
		return &inventory.NotOpen{ItemID: id, Wait: ms}
	case -7:
		return fmt.Errorf("%s %d: %w", s.kind, id, inventory.ErrSaleClosed)
	}
	return fmt.Errorf("%w: a script refused %s %d with code %d", inventory.ErrUnavailable, s.kind, id, code)
}
