-- The bursts in flight, one row per item (internal/store/bursts.go): the
-- dashboard's burst (and so `seckill story`) marks its item here before it
-- fires, on whichever instance it runs, so that a second burst of the same
-- item, or a reset of it, is refused while the first runs (409
-- burst-in-progress) instead of mixing its buyers into the first one's.
-- token: the burst's own random mark, so only it extends or removes the
-- row. until_us: when the mark lapses, in microseconds since the Unix
-- epoch by the clock of the instance that wrote it; the running burst
-- pushes it forward, and a row past it (its instance died mid-burst) is
-- taken over by the next burst.
CREATE TABLE IF NOT EXISTS burst_runs (
  kind     VARCHAR(16) NOT NULL,
  item_id  BIGINT      NOT NULL,
  token    VARCHAR(32) NOT NULL,
  until_us BIGINT      NOT NULL,
  PRIMARY KEY (kind, item_id)
);
