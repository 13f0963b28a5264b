-- The verdict of every burst the dashboard (or `seckill story`) fired: what
-- the stage sold and oversold, kept apart from the orders. Resetting a
-- product deletes its orders, and the payment-timeout job cancels unpaid
-- ones; neither touches these rows, so an oversell stays on the record.
-- at_us: when the burst ended, in microseconds since the Unix epoch (one
-- integer type on MySQL and SQLite alike).
CREATE TABLE IF NOT EXISTS burst_verdicts (
  id            BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
  kind          VARCHAR(16) NOT NULL,
  item_id       BIGINT      NOT NULL,
  stage         VARCHAR(32) NOT NULL,
  buyers        INT         NOT NULL,
  initial_stock INT         NOT NULL,
  sold          INT         NOT NULL,
  oversold      INT         NOT NULL,
  elapsed_ms    DOUBLE      NOT NULL,
  p99_ms        DOUBLE      NOT NULL,
  at_us         BIGINT      NOT NULL,
  INDEX burst_verdicts_by_item (kind, item_id, id)
);
