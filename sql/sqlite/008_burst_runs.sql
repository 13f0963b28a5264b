-- Bursts in flight: the same table as sql/mysql/008_burst_runs.sql (read
-- its comments).
CREATE TABLE IF NOT EXISTS burst_runs (
  kind     TEXT    NOT NULL,
  item_id  INTEGER NOT NULL,
  token    TEXT    NOT NULL,
  until_us INTEGER NOT NULL,
  PRIMARY KEY (kind, item_id)
);
