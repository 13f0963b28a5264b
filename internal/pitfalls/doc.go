// Package pitfalls reproduces, on demand, the classic mistakes of hand-made
// Redis locks, so that a workshop can watch each one fail instead of taking
// it on trust. Each test writes the naive pattern in test code, forces the
// interleaving that breaks it (no sleeping and hoping), asserts the damage,
// and then shows that internal/lock refuses the same interleaving.
//
// The workshop pages under /workshop name these tests:
//
//   - TestSetnxThenExpireLeavesLockWithoutTTL: SETNX, then EXPIRE, with the
//     client dying in between, leaves a lock that never expires.
//   - TestDelWithoutOwnerCheckReleasesAnotherClientsLock: a plain DEL after
//     the lease ran out frees the next holder's lock.
//   - TestWatchdogWithoutOwnerCheckExtendsAnotherClientsLock: a renewal
//     with plain PEXPIRE extends a lock that now belongs to someone else.
//   - TestFailoverLosesLockAndGrantsItTwice: asynchronous replication loses
//     a lock on failover, and a second client obtains it.
//
// The fifth pitfall, a holder paused past its TTL, is demonstrated where the
// fence that stops it lives: TestFencingRejectsPausedHolder in
// internal/inventory.
//
// The tests need a Redis server (SECKILL_TEST_REDIS_ADDR), and the failover
// test a redis-server binary to start two servers of its own.
package pitfalls
