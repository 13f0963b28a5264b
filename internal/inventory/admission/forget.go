package admission

import (
	"context"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// Forget passes an archive on to a stage that keeps its own copy.
func (w crowded) Forget(ctx context.Context, id int64) error {
	if f, ok := w.next.(inventory.Forgetter); ok {
		return f.Forget(ctx, id)
	}
	return nil
}
