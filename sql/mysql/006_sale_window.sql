-- The sale window: an item may open at a set instant and close at another
-- (UTC, microseconds). NULL is no bound on that side: the seed data, and
-- every item reset without a window, is always open. The stages compare
-- them with a reference clock, never an instance's own: this database's
-- UTC_TIMESTAMP(6) in the SQL stages, Redis TIME in the Redis stages (see
-- internal/inventory/window.go).
--
-- Migrate skips an ADD COLUMN whose column exists (sql/mysql/003 says
-- why), so this file upgrades an older database in place and may run at
-- every start.
ALTER TABLE products ADD COLUMN opens_at DATETIME(6) NULL DEFAULT NULL;
ALTER TABLE products ADD COLUMN closes_at DATETIME(6) NULL DEFAULT NULL;
ALTER TABLE coupon_batches ADD COLUMN opens_at DATETIME(6) NULL DEFAULT NULL;
ALTER TABLE coupon_batches ADD COLUMN closes_at DATETIME(6) NULL DEFAULT NULL;
