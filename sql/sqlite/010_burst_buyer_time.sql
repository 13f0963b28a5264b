-- The buyer-time p99 of a burst's verdict: the same column as
-- sql/mysql/010_burst_buyer_time.sql (read its comment).
ALTER TABLE burst_verdicts ADD COLUMN buyer_p99_ms REAL NOT NULL DEFAULT 0;
