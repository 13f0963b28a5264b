package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/seckill-lab/seckill/internal/api"
)

// SetRoom sets the product's waiting room (PUT
// /api/v1/admin/products/{id}/room) through the first target: the room
// lives in the fleet's Redis, so one setting is every instance's.
func (f *Fleet) SetRoom(ctx context.Context, id int64, set api.RoomSettings) (api.Room, error) {
	body, err := json.Marshal(set)
	if err != nil {
		return api.Room{}, err
	}
	var room api.Room
	if err := f.Do(ctx, http.MethodPut, fmt.Sprintf("%s/api/v1/admin/products/%d/room", f.Targets[0], id), body, &room); err != nil {
		return api.Room{}, fmt.Errorf("setting the waiting room of product %d: %w", id, err)
	}
	return room, nil
}

// RemoveRoom removes the product's waiting room, so that the rows after
// the room's buy without a pass.
func (f *Fleet) RemoveRoom(ctx context.Context, id int64) error {
	if err := f.Do(ctx, http.MethodDelete, fmt.Sprintf("%s/api/v1/admin/products/%d/room", f.Targets[0], id), nil, nil); err != nil {
		return fmt.Errorf("removing the waiting room of product %d: %w", id, err)
	}
	return nil
}
