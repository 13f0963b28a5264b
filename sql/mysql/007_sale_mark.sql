-- last_sale: the mark of the last sale batch whose guarded decrement took
-- units from this row (internal/store/sale.go). A batch writes a random
-- mark of its own with the decrement, and takes its orders back unless the
-- row carries that mark: whether the units left is read from the data, in
-- the same transaction, never from ROW_COUNT(), which MariaDB answers with
-- -1 once the client that sent the batch has gone. A lock holder's fenced
-- write is such a batch too, and its claim of the row (FenceAndRead)
-- writes a mark and reads whether it took the same way. Nothing else
-- reads it.
--
-- Migrate skips an ADD COLUMN whose column exists (sql/mysql/003 says
-- why). The demo's SQLite has the column too, and leaves it empty.
ALTER TABLE products ADD COLUMN last_sale VARCHAR(32) NOT NULL DEFAULT '';
ALTER TABLE coupon_batches ADD COLUMN last_sale VARCHAR(32) NOT NULL DEFAULT '';
