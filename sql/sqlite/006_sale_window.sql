-- The sale window: the same columns as sql/mysql/006_sale_window.sql (read
-- its comments). The demo's SQLite runs in process, so its clock, which
-- the SQL stages compare these with, is the process's own.
ALTER TABLE products ADD COLUMN opens_at TEXT NULL DEFAULT NULL;
ALTER TABLE products ADD COLUMN closes_at TEXT NULL DEFAULT NULL;
ALTER TABLE coupon_batches ADD COLUMN opens_at TEXT NULL DEFAULT NULL;
ALTER TABLE coupon_batches ADD COLUMN closes_at TEXT NULL DEFAULT NULL;
