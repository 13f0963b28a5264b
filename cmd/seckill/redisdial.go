package main

import "github.com/seckill-lab/seckill/internal/redisconn"

// unpeekedDial is the dialer of the app's Redis clients: go-redis's
// default, with the socket hidden so that go-redis skips its check of
// each pooled connection before use (internal/redisconn says why, and what
// it costs). The client of redis-atomic's batches of reservations keeps
// go-redis's own dialer, and its check (newBatchClient, batchOptions).
var unpeekedDial = redisconn.Dial
