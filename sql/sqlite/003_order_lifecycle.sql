-- The order lifecycle: the same columns as sql/mysql/003_order_lifecycle.sql
-- (read its comments). SQLite has no ADD COLUMN IF NOT EXISTS either; the
-- store's Migrate skips an ALTER TABLE ... ADD COLUMN whose column exists.

ALTER TABLE orders ADD COLUMN status TEXT NOT NULL DEFAULT 'confirmed' CHECK (status IN ('confirmed', 'paid', 'cancelled', 'failed'));
ALTER TABLE orders ADD COLUMN written_at TEXT NOT NULL DEFAULT '1970-01-01 00:00:00';
ALTER TABLE orders ADD COLUMN copy_gen TEXT NOT NULL DEFAULT '';
CREATE INDEX orders_by_status ON orders (status, created_at);
UPDATE orders SET written_at = created_at WHERE written_at = '1970-01-01 00:00:00';

ALTER TABLE coupon_grabs ADD COLUMN status TEXT NOT NULL DEFAULT 'confirmed' CHECK (status IN ('confirmed', 'failed'));
ALTER TABLE coupon_grabs ADD COLUMN written_at TEXT NOT NULL DEFAULT '1970-01-01 00:00:00';
UPDATE coupon_grabs SET written_at = created_at WHERE written_at = '1970-01-01 00:00:00';
