package redisstage

import "strconv"

// The Redis keys of one item, which redis-atomic and redis-stream share.

// keys of one item share a hash tag, so the scripts work on Redis Cluster:
// the stock, its buyers, the reservations in flight, and the orders that
// redis-stream queued and has not written yet (stage_redis_stream.go), which
// also sells from this copy.
func (s *RedisAtomic) keys(id int64) []string {
	p := s.keyPrefix(id)
	return []string{p + "stock", p + "buyers", p + "pending", p + "queued"}
}

// key names one of the item's keys: seckill:{<kind>:<id>}:<name>, so all
// of an item's keys hash to one Cluster slot.
func (s *RedisAtomic) key(id int64, name string) string { return s.keyPrefix(id) + name }

func (s *RedisAtomic) keyPrefix(id int64) string {
	return "seckill:{" + s.kind + ":" + strconv.FormatInt(id, 10) + "}:"
}
