// Package chaos proves seckill under faults. Its tests start real
// `seckill serve` processes, route every connection they make to Redis and
// MySQL through an in-process toxiproxy on loopback, and then break things:
// latency, blackholes and connection resets on the wire; paused, killed and
// emptied processes; hostile HTTP input. After every fault they check, in
// MySQL itself, that nothing was oversold, that stock is conserved, that
// every 201 has exactly one order row and every order row a 201 (or a
// request whose outcome the client could not know), and that every request
// ended within its deadline. One burst's history is checked for
// linearizability with porcupine.
//
// The package holds tests only. `go test ./chaos/` runs a short form of each
// test (CI); `make chaos` runs the full form (SECKILL_CHAOS=full) and writes
// the figures RELIABILITY.md quotes to test-artifacts/chaos/.
package chaos
