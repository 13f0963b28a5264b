-- The order lifecycle (stage redis-stream and payment timeouts). An order
-- is written "confirmed" by a buy; it becomes "paid" when paid in time, or
-- "cancelled" by the payment-timeout job, which returns its units to the
-- stock. An order that redis-stream accepted but could not write (sold out
-- in the database, say) is written "failed", so that whichever consumer
-- comes second sees its fate in the unique order number instead of writing
-- it again. Only confirmed and paid orders hold stock.
--
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS (MariaDB has), and neither has
-- CREATE INDEX IF NOT EXISTS: the store's Migrate skips an ALTER TABLE ...
-- ADD COLUMN or a CREATE INDEX whose column or index exists already, so
-- this file may run at every start, and upgrades a database of the first
-- schema in place. docker-compose.yml's MySQL applies it once, as is, to an
-- empty database.

-- written_at: when the order was written to the database (for redis-stream
-- later than created_at, the moment it was accepted). Rows from before this
-- column get their created_at below; that UPDATE runs at every start and
-- scans the orders, which is nothing at a sale's size.
ALTER TABLE orders ADD COLUMN status VARCHAR(16) NOT NULL DEFAULT 'confirmed' CHECK (status IN ('confirmed', 'paid', 'cancelled', 'failed'));
ALTER TABLE orders ADD COLUMN written_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00';
-- copy_gen: set when a cancelled order's units are still owed to the Redis
-- copy of the stock (redis-atomic and redis-stream sell from it), to the
-- generation of that copy; '' once returned, or when nothing is owed.
ALTER TABLE orders ADD COLUMN copy_gen VARCHAR(40) NOT NULL DEFAULT '';
-- The payment-timeout job looks for old confirmed orders.
CREATE INDEX orders_by_status ON orders (status, created_at);
UPDATE orders SET written_at = created_at WHERE written_at = '1970-01-01 00:00:00';

-- Coupon grabs are free: no payment, no cancellation. They are confirmed,
-- or failed when redis-stream could not write them.
ALTER TABLE coupon_grabs ADD COLUMN status VARCHAR(16) NOT NULL DEFAULT 'confirmed' CHECK (status IN ('confirmed', 'failed'));
ALTER TABLE coupon_grabs ADD COLUMN written_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00';
UPDATE coupon_grabs SET written_at = created_at WHERE written_at = '1970-01-01 00:00:00';
