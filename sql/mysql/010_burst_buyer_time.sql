-- A burst's verdict keeps the p99 of buyer time beside p99_ms (response
-- time): timed from the burst's start, when every buyer of the crowd
-- arrived, so it holds the wait for a free worker that response time,
-- started at each request's send, leaves out (issue #59). Verdicts
-- recorded before it read 0: not measured.
ALTER TABLE burst_verdicts ADD COLUMN buyer_p99_ms DOUBLE NOT NULL DEFAULT 0;
