package store

import (
	"errors"
	"fmt"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// A server that has run out of connections is load, not a bug: the HTTP
// layer must answer 503 overloaded with Retry-After, never 500.
func TestTranslateFullServerIsOverload(t *testing.T) {
	for _, n := range []uint16{mysqlTooManyConns, mysqlUserConns, mysqlUserLimit} {
		driverErr := &mysqldriver.MySQLError{Number: n, Message: "Too many connections"}
		err := translate(fmt.Errorf("deduct: %w", driverErr))
		if !errors.Is(err, inventory.ErrOverloaded) {
			t.Errorf("MySQL error %d: got %v, want ErrOverloaded", n, err)
		}
		if !errors.Is(err, driverErr) {
			t.Errorf("MySQL error %d: the driver error left the chain: %v", n, err)
		}
	}
}

// Deadlock victims and lock wait timeouts stay retryable after gorm's error
// translation (TranslateError), and a duplicate key is not retried.
func TestRetryableAfterGormTranslation(t *testing.T) {
	translator := mysql.Dialector{}
	for n, want := range map[uint16]bool{mysqlDeadlock: true, mysqlLockWait: true, 1062: false, mysqlCheckViolation: false} {
		err := translator.Translate(&mysqldriver.MySQLError{Number: n})
		if got := retryable(fmt.Errorf("deduct: %w", err)); got != want {
			t.Errorf("MySQL error %d: retryable = %v, want %v", n, got, want)
		}
	}
}
