-- Archived items: the same tables as sql/mysql/009_archive.sql (read its
-- comments).
CREATE TABLE IF NOT EXISTS archived_products (
  id            INTEGER PRIMARY KEY,
  name          TEXT    NOT NULL,
  price_cents   INTEGER NOT NULL,
  initial_stock INTEGER NOT NULL,
  stock         INTEGER NOT NULL,
  opens_at      TEXT    NULL DEFAULT NULL,
  closes_at     TEXT    NULL DEFAULT NULL,
  archived_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE TABLE IF NOT EXISTS archived_coupon_batches (
  id          INTEGER PRIMARY KEY,
  name        TEXT    NOT NULL,
  total       INTEGER NOT NULL,
  remaining   INTEGER NOT NULL,
  opens_at    TEXT    NULL DEFAULT NULL,
  closes_at   TEXT    NULL DEFAULT NULL,
  archived_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
