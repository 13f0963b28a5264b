package chaos

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// burst, proxy, link and client must be gone once the tests are.
func TestMain(m *testing.M) {
	code := m.Run()
	removeBinary()
	if code == 0 {
		writeTable()
	}
	goleak.VerifyTestMain(exitOnly{code},
		// The in-process toxiproxy's links and go-redis's pools end
		// asynchronously after Stop/Close; goleak retries until they have,
		// so nothing of theirs needs ignoring. The only long-lived
		// goroutine is database/sql's connection opener, which lives until
		// the *sql.DB is closed (every test closes its own).
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}

// exitOnly hands goleak the code m.Run already produced.
type exitOnly struct{ code int }

func (e exitOnly) Run() int { return e.code }
