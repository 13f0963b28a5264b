-- seckill schema for the embedded SQLite file used by `seckill demo`.
-- The same tables and constraints as sql/mysql/001_schema.sql; SQLite
-- enforces CHECK constraints by default.

CREATE TABLE IF NOT EXISTS products (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  name          TEXT    NOT NULL,
  price_cents   INTEGER NOT NULL DEFAULT 0 CHECK (price_cents >= 0),
  initial_stock INTEGER NOT NULL CHECK (initial_stock >= 0),
  stock         INTEGER NOT NULL CHECK (stock >= 0),
  fence_token   INTEGER NOT NULL DEFAULT 0,
  created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  updated_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE TABLE IF NOT EXISTS orders (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  order_no    TEXT    NOT NULL UNIQUE,
  product_id  INTEGER NOT NULL,
  user_id     TEXT    NOT NULL,
  quantity    INTEGER NOT NULL CHECK (quantity > 0),
  stage       TEXT    NOT NULL,
  instance    TEXT    NOT NULL DEFAULT '',
  created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  UNIQUE (product_id, user_id)
);

CREATE TABLE IF NOT EXISTS coupon_batches (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  name        TEXT    NOT NULL,
  total       INTEGER NOT NULL CHECK (total >= 0),
  remaining   INTEGER NOT NULL CHECK (remaining >= 0),
  fence_token INTEGER NOT NULL DEFAULT 0,
  created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  updated_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE TABLE IF NOT EXISTS coupon_grabs (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  grab_no     TEXT    NOT NULL UNIQUE,
  batch_id    INTEGER NOT NULL,
  user_id     TEXT    NOT NULL,
  quantity    INTEGER NOT NULL DEFAULT 1 CHECK (quantity = 1),
  stage       TEXT    NOT NULL,
  instance    TEXT    NOT NULL DEFAULT '',
  created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  UNIQUE (batch_id, user_id)
);
