package httpapi_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// rowHolder locks product 1's row from a MySQL session of its own, as
// another buyer's transaction would: a sale's write then waits in MySQL,
// sent and unanswered, until release.
type rowHolder struct {
	t     *testing.T
	admin *sql.DB
	tx    atomic.Pointer[sql.Tx]
}

func newRowHolder(t *testing.T, dsn string) *rowHolder {
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	return &rowHolder{t: t, admin: admin}
}

// hold locks the row; it reports a failure with Errorf, so that it may run
// on a stage's goroutine.
func (h *rowHolder) hold() {
	tx, err := h.admin.BeginTx(context.Background(), nil)
	if err == nil {
		var stock int
		err = tx.QueryRow("SELECT stock FROM products WHERE id = 1 FOR UPDATE").Scan(&stock)
	}
	if err != nil {
		h.t.Errorf("locking product 1's row: %v", err)
		return
	}
	h.tx.Store(tx)
}

// release ends the hold, if any; MySQL then runs the waiting write to its
// end, whether or not anyone still waits for its answer.
func (h *rowHolder) release() {
	if tx := h.tx.Swap(nil); tx != nil {
		if err := tx.Rollback(); err != nil {
			h.t.Errorf("releasing product 1's row: %v", err)
		}
	}
}

// count reads one integer from the test's database.
func (h *rowHolder) count(query string) int {
	var n int
	if err := h.admin.QueryRow(query).Scan(&n); err != nil {
		h.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// until polls cond (every 20 ms, for at most a minute: the wait follows
// MySQL's progress, the bound only ends a test that would hang) and fails
// the test with what it waited for if it never holds.
func (h *rowHolder) until(what string, cond func() bool) {
	h.t.Helper()
	for end := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			h.t.Fatalf("waited a minute for %s", what)
		}
	}
}

// writeSent reports whether MySQL runs the sale's write (the batch of its
// order and the stock's UPDATE): sent, its answer held behind the row.
// (MariaDB's INNODB_TRX was seen to leave such a waiting transaction out;
// the process list does not.)
func (h *rowHolder) writeSent() bool {
	return h.count("SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID() AND info LIKE '%UPDATE products SET stock%'") > 0
}

// settled reports whether no session of the test's database but this one
// runs a statement: a write whose client hung up has committed or rolled
// back, and its session ended.
func (h *rowHolder) settled() bool {
	return h.count("SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID() AND command <> 'Sleep'") == 0
}

// How a test holds a sale's write in MySQL, sent and unanswered.
type writeHold int

const (
	// holdRow: another transaction locks the item's row before the buy;
	// the sale's batch (order rows, stock UPDATE, COMMIT) waits behind it.
	holdRow writeHold = iota
	// holdRowInSection: the same, taken inside a lock stage's section
	// just before its write (its read would otherwise wait instead).
	holdRowInSection
	// holdCommitAnswer: the COMMIT of the sale's transaction of separate
	// statements reaches MySQL, which commits it, and its answer is held
	// on the way back.
	holdCommitAnswer
)

// stageUnderTest builds one stage over db and rdb, its Redis keys under
// prefix. beforeWrite runs just before a lock stage's stock write.
type stageUnderTest struct {
	name string
	hold writeHold
	// cued: the stage writes under the request's own context, so the
	// deadline can pass on cue, once the write is held. The Redis stages
	// write through a group commit, under a context of the group's that
	// ends at the earliest member's deadline and that no member can
	// cancel: only a real deadline ends it.
	cued  bool
	build func(t *testing.T, db *store.DB, rdb *redis.Client, prefix string, beforeWrite func()) inventory.Stage
}

// section is the options of a lock stage's critical section under test.
func section(fencing bool, beforeWrite func()) inventory.SectionOptions {
	return inventory.SectionOptions{Fencing: fencing, BeforeWrite: func(inventory.Order) { beforeWrite() }}
}

var stagesWithAWriteThatCanOutliveTheDeadline = []stageUnderTest{
	{"unlocked", holdCommitAnswer, true, func(_ *testing.T, db *store.DB, _ *redis.Client, _ string, beforeWrite func()) inventory.Stage {
		return inventory.NewUnlocked(db.Products(), "product", section(false, beforeWrite))
	}},
	{"local-mutex", holdCommitAnswer, true, func(_ *testing.T, db *store.DB, _ *redis.Client, _ string, beforeWrite func()) inventory.Stage {
		return inventory.NewLocalMutex(db.Products(), "product", section(false, beforeWrite))
	}},
	{"redis-lock", holdRowInSection, true, func(t *testing.T, db *store.DB, rdb *redis.Client, prefix string, beforeWrite func()) inventory.Stage {
		locker := testenv.NewLock(t, rdb, lock.Options{Prefix: prefix + ":lock:"})
		return inventory.NewRedisLock(locker, db.Products(), "product", section(true, beforeWrite),
			inventory.LockOptions{TTL: 10 * time.Second, Wait: time.Minute})
	}},
	{"redlock", holdRowInSection, true, func(t *testing.T, db *store.DB, rdb *redis.Client, prefix string, beforeWrite func()) inventory.Stage {
		quorum := testenv.NewRedLock(t, []redis.UniversalClient{rdb}, lock.RedLockOptions{Options: lock.Options{Prefix: prefix + ":redlock:"}})
		return inventory.NewRedLock(quorum, db.Products(), "product", section(true, beforeWrite),
			inventory.LockOptions{TTL: 10 * time.Second, Wait: time.Minute})
	}},
	{"db-atomic", holdRow, true, func(_ *testing.T, db *store.DB, _ *redis.Client, _ string, _ func()) inventory.Stage {
		return inventory.NewDBAtomic(db.Products())
	}},
	{"redis-atomic", holdRow, false, func(t *testing.T, db *store.DB, rdb *redis.Client, prefix string, _ func()) inventory.Stage {
		s := redisstage.NewRedisAtomic(rdb, db.Products(), prefix, nil)
		if err := s.Reset(context.Background(), 1, 0); err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"redis-sharded", holdRow, false, func(t *testing.T, db *store.DB, rdb *redis.Client, prefix string, _ func()) inventory.Stage {
		s := redisstage.NewRedisSharded(rdb, db.Products(), prefix, 4, nil)
		if err := s.Reset(context.Background(), 1, 0); err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// commitHold holds the answer to the next COMMIT sent on a connection it
// wraps, once armed, until release.
type commitHold struct {
	armed   atomic.Bool
	sent    chan struct{} // closed once the armed COMMIT was written
	release chan struct{}
	once    sync.Once
}

func newCommitHold() *commitHold {
	return &commitHold{sent: make(chan struct{}), release: make(chan struct{})}
}

// open opens dsn's database, migrated, through connections that h wraps.
func (h *commitHold) open(t *testing.T, dsn string) *store.DB {
	t.Helper()
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Net = testenv.Name("commit-hold")
	mysqldriver.RegisterDialContext(cfg.Net, func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &commitHeldConn{Conn: c, h: h}, nil
	})
	return openMigrated(t, cfg.FormatDSN())
}

// unblock releases a held answer (and any later one).
func (h *commitHold) unblock() { h.once.Do(func() { close(h.release) }) }

// commitHeldConn is a connection whose answer to an armed COMMIT waits
// for the hold's release.
type commitHeldConn struct {
	net.Conn
	h       *commitHold
	holding atomic.Bool
}

// isCommit reports whether b is the packet of the query COMMIT (a 3-byte
// length, a sequence number, COM_QUERY).
func isCommit(b []byte) bool {
	return len(b) == 4+1+len("COMMIT") && b[4] == 0x03 && string(b[5:]) == "COMMIT"
}

func (c *commitHeldConn) Write(b []byte) (int, error) {
	commit := isCommit(b) && c.h.armed.CompareAndSwap(true, false)
	n, err := c.Conn.Write(b)
	if commit {
		c.holding.Store(true)
		close(c.h.sent)
	}
	return n, err
}

func (c *commitHeldConn) Read(b []byte) (int, error) {
	if c.holding.Swap(false) {
		<-c.h.release
	}
	return c.Conn.Read(b)
}

// openMigrated opens the MySQL database at dsn, migrated, for the test.
func openMigrated(t *testing.T, dsn string) *store.DB {
	t.Helper()
	ctx := context.Background()
	db, err := store.OpenMySQL(ctx, dsn, store.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestWriteThatOutlivedItsDeadlineIsNeverAFailure: a buyer's sale is sent
// to MySQL, waits there behind another transaction's lock on the item's
// row, and the request's deadline passes before its answer comes; MySQL
// then commits it. The buyer holds an order, so its answer must be the
// order or 503 outcome-unknown, never a failure such as 503 timeout (which
// a client, and the lab's orders-match rule, take for "nothing bought");
// and its retry with the same Idempotency-Key must answer 201 with that
// order, and replay it after. Every stage whose buyer waits for a database
// write is here: a batch that ends in its COMMIT (db-atomic, the Redis
// stages' group commit, the fenced write of redis-lock and redlock) is
// held behind the row; a transaction of separate statements (the unfenced
// write of unlocked and local-mutex), which the deadline rolls back before
// its COMMIT, is held at the COMMIT's answer. redis-stream has no such
// path: its buyer is answered once the order is queued in Redis, and the
// writers' commits answer nobody.
func TestWriteThatOutlivedItsDeadlineIsNeverAFailure(t *testing.T) {
	for _, st := range stagesWithAWriteThatCanOutliveTheDeadline {
		t.Run(st.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := testenv.MySQLDSN(t)
			commit := newCommitHold()
			t.Cleanup(commit.unblock)
			db := commit.open(t, dsn)
			if err := db.Products().Reset(ctx, 1, 2); err != nil {
				t.Fatal(err)
			}
			rdb := testenv.Redis(t)
			prefix := testenv.Name("late-write")
			row := newRowHolder(t, dsn)
			t.Cleanup(row.release)
			var armed atomic.Bool // the lock stages take the row in the section
			stage := st.build(t, db, rdb, prefix, func() {
				if armed.CompareAndSwap(true, false) {
					row.hold()
				}
			})
			h := httpapi.NewServer(httpapi.Deps{
				Instance:       "late-1",
				Products:       inventory.NewService(db.Products(), map[string]inventory.Stage{st.name: stage}, "late-1", "O"),
				Stage:          st.name,
				RequestTimeout: time.Minute,
				// A lease far longer than the test: the retry runs because
				// the first run's outcome is recorded unknown.
				Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: prefix + ":idem:", Lease: time.Hour}),
			})

			// The buy whose write waits in MySQL past its deadline. With a
			// real deadline the write may not have been sent in time on a
			// starved machine (then nothing is bought, and the answer must
			// say no more): the run is repeated with a longer one.
			var first *httptest.ResponseRecorder
			var held inventory.Order
			var user, key, body string
			for attempt, wait := 0, time.Second; ; attempt, wait = attempt+1, wait*2 {
				user, key = fmt.Sprintf("late-%d", attempt), fmt.Sprintf("late-key-%d", attempt)
				body = fmt.Sprintf(`{"user_id":%q,"quantity":1}`, user)
				answered := make(chan *httptest.ResponseRecorder, 1)
				switch {
				case st.cued:
					cue := testkit.NewCueDeadline()
					reached := row.writeSent
					switch st.hold {
					case holdRow:
						row.hold()
					case holdRowInSection:
						armed.Store(true)
					case holdCommitAnswer:
						commit.armed.Store(true)
						reached = func() bool {
							select {
							case <-commit.sent:
								return true
							default:
								return false
							}
						}
					}
					go func() { answered <- postBy(h, cue, key, body) }()
					row.until("the sale's write to reach MySQL", func() bool { return len(answered) > 0 || reached() })
					if len(answered) > 0 {
						rec := <-answered
						t.Fatalf("the buy was answered %d %s before its write reached MySQL", rec.Code, rec.Body)
					}
					cue.Fall()
				default:
					row.hold()
					cut, cancel := context.WithTimeout(ctx, wait)
					go func() { defer cancel(); answered <- postBy(h, cut, key, body) }()
				}
				first = <-answered
				row.release()
				commit.unblock()
				row.until("MySQL to end the write nobody waits for", row.settled)
				var err error
				held, err = db.Products().OrderOf(ctx, 1, user)
				if err == nil {
					break
				}
				if !errors.Is(err, inventory.ErrOrderNotFound) {
					t.Fatal(err)
				}
				if st.cued || first.Code == 201 {
					t.Fatalf("the buy was answered %d %s, and no order was written", first.Code, first.Body)
				}
				if wait > 30*time.Second {
					t.Fatalf("no write reached MySQL within %s; the last answer: %d %s", wait, first.Code, first.Body)
				}
				t.Logf("the write did not reach MySQL within %s (answered %d %s): again, with twice the time", wait, first.Code, first.Body)
			}
			t.Logf("order %s committed after its buyer's deadline; the buyer was answered %d %s", held.No, first.Code, first.Body)
			switch {
			case first.Code == 201:
				wantOrder(t, "the first answer", first, held.No)
			case first.Code != 503 || problemType(t, first) != "outcome-unknown":
				t.Fatalf("a buyer whose order %s was written was answered %d %s, want the order or 503 outcome-unknown", held.No, first.Code, first.Body)
			}

			retry := post(h, key, body)
			wantOrder(t, "the retry with the same key", retry, held.No)
			replay := post(h, key, body)
			if replay.Code != 201 || replay.Header().Get("Idempotent-Replayed") != "true" || replay.Body.String() != retry.Body.String() {
				t.Fatalf("after the retry, the key replays its answer: %d %s", replay.Code, replay.Body)
			}
			var o api.Order
			if err := json.Unmarshal(replay.Body.Bytes(), &o); err != nil || o.UserID != user {
				t.Fatalf("the replay: %s (%v)", replay.Body, err)
			}
			a, err := db.Products().Audit(ctx, 1)
			if err != nil || a.Orders != 1 || a.Stock != 1 || !a.Conserved() {
				t.Fatalf("Audit = %+v, %v; want the one order and one unit left", a, err)
			}
		})
	}
}
