// Package cpu reads the CPU time the processes of a sale spend, around
// every attack and baseline of the lab, from a list of sources: each
// instance's process, each Redis, the local MySQL, and the lab itself.
//
// Answers per second on a shared machine move with whatever else the
// machine runs, by a third from one run to the next. The CPU time that the
// processes of a sale spend per answer moves far less: another engineer's
// build slows an answer down, but does not make it cost more CPU. So the
// lab reads, around every attack and every baseline, the CPU time of each
// process that takes part:
//
//   - each instance, once per process (the demo's three instances are one
//     process, and so is its embedded Redis): on this machine, its
//     process's CPU-time clock (processClock, exact to the ns); elsewhere,
//     seckill_process_cpu_rusage_seconds_total from its /metrics
//     (getrusage, exact to the µs; process_cpu_seconds_total, in 10 ms
//     ticks, from an instance that has not got it). A scrape costs the
//     instance about a millisecond, most of it after the counter was read
//     (encoding and compressing the page), and that part fell into the
//     next attack's CPU: a reading of every instance per attack, and four
//     per sliced baseline. The clock costs the instance nothing;
//   - each Redis named by --cpu-redis: INFO CPU, used_cpu_sys + used_cpu_user;
//   - MySQL, when SECKILL_MYSQL_DSN names this machine: its process's
//     CPU-time clock, or utime + stime of the mariadbd (or mysqld) process
//     in /proc/<pid>/stat, in 10 ms ticks, where the clock cannot be read;
//   - the lab itself: getrusage(RUSAGE_SELF).
//
// The sum, divided by the answers, is the machine's CPU per answer. A
// source that could not be read makes the sum unavailable rather than
// smaller; a source that is not there at all (no MySQL in the demo) is
// listed as not measured, and the sum covers the rest.
package cpu
