-- Burst verdicts: the same table as sql/mysql/005_burst_verdicts.sql (read
-- its comments).
CREATE TABLE IF NOT EXISTS burst_verdicts (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  kind          TEXT    NOT NULL,
  item_id       INTEGER NOT NULL,
  stage         TEXT    NOT NULL,
  buyers        INTEGER NOT NULL,
  initial_stock INTEGER NOT NULL,
  sold          INTEGER NOT NULL,
  oversold      INTEGER NOT NULL,
  elapsed_ms    REAL    NOT NULL,
  p99_ms        REAL    NOT NULL,
  at_us         INTEGER NOT NULL
);
CREATE INDEX burst_verdicts_by_item ON burst_verdicts (kind, item_id, id);
