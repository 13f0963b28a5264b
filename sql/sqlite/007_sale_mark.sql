-- last_sale: the same column as sql/mysql/007_sale_mark.sql (read its
-- comments), so that the models match both engines. The demo's SQLite
-- sells in a transaction of separate statements, whose row counts come
-- straight from the driver, and leaves it empty.
ALTER TABLE products ADD COLUMN last_sale TEXT NOT NULL DEFAULT '';
ALTER TABLE coupon_batches ADD COLUMN last_sale TEXT NOT NULL DEFAULT '';
