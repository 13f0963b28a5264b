package inventory

import "context"

// passKey marks a context as the buy of a waiting room's pass holder (see
// WithPass).
type passKey struct{}

// WithPass marks ctx as the buy of a buyer the item's waiting room let in
// with a pass (package room): the room sized its admission to the sale,
// so the crowd control in front of the stage neither turns it away for
// the per-item cap nor holds it for the opening draw, which the room's own
// draw replaced.
func WithPass(ctx context.Context) context.Context { return context.WithValue(ctx, passKey{}, true) }

// HasPass reports whether WithPass marked ctx.
func HasPass(ctx context.Context) bool { v, _ := ctx.Value(passKey{}).(bool); return v }
