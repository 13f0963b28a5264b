-- A user id is an opaque name, compared byte for byte everywhere else: by
-- Redis (the buyers of an item's copy, the Idempotency-Key records) and by
-- SQLite. The first schema left orders.user_id and coupon_grabs.user_id in
-- the table's default collation, which ignores case and accents
-- (utf8mb4_general_ci on MariaDB, utf8mb4_0900_ai_ci on MySQL 8): there,
-- "alice", "ALICE" and "alicé" were one buyer, so the second of them was
-- refused as a repeat in MySQL while Redis had sold them a unit, and a
-- lookup of one buyer's order could find another's.
--
-- utf8mb4_bin compares code points, exactly, on both servers. It still pads
-- with spaces ("alice" = "alice "), so the API refuses user ids that begin
-- or end with white space. Changing the collation cannot break the unique
-- keys: it only tells apart values that were equal before.
--
-- The store's Migrate skips a MODIFY COLUMN whose column has the collation
-- it names already, so this runs once, not at every start (it rebuilds the
-- table).
ALTER TABLE orders MODIFY COLUMN user_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
ALTER TABLE coupon_grabs MODIFY COLUMN user_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
