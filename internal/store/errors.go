package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"

	gosqlite "github.com/glebarez/go-sqlite"
	mysqldriver "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// Driver error numbers the store understands beyond what gorm translates
// itself (TranslateError turns a duplicate key, MySQL 1062 or SQLite's
// UNIQUE and PRIMARY KEY codes, into gorm.ErrDuplicatedKey).
const (
	mysqlTooManyConns   = 1040 // ER_CON_COUNT_ERROR: max_connections reached
	mysqlDuplicate      = 1062 // ER_DUP_ENTRY, from a sale batch (sale.go) that gorm did not run
	mysqlUserConns      = 1203 // ER_TOO_MANY_USER_CONNECTIONS (global max_user_connections)
	mysqlUserLimit      = 1226 // ER_USER_LIMIT_REACHED (the account's own MAX_USER_CONNECTIONS)
	mysqlLockWait       = 1205 // ER_LOCK_WAIT_TIMEOUT
	mysqlDeadlock       = 1213 // ER_LOCK_DEADLOCK
	mysqlOutOfRange     = 1264 // ER_WARN_DATA_OUT_OF_RANGE
	mysqlUnsignedRange  = 1690 // ER_DATA_OUT_OF_RANGE
	mysqlCheckViolation = 3819 // ER_CHECK_CONSTRAINT_VIOLATED (MySQL 8)
	mariaCheckViolation = 4025 // ER_CONSTRAINT_FAILED (MariaDB)

	sqliteCheck = 275 // SQLITE_CONSTRAINT_CHECK
)

// translate maps gorm's and the drivers' errors to inventory sentinels,
// keeping the original in the chain: a duplicate key (one order per item
// and user, unique order numbers) is ErrAlreadyPurchased, a missing row is
// ErrNotFound, a stock CHECK or range violation is ErrSoldOut (the
// constraint stopped an oversell), a server out of connections is
// ErrOverloaded, a broken connection is ErrUnavailable.
func translate(err error) error {
	if err == nil {
		return nil
	}
	// A query cut off by the request's deadline is a timeout, whatever
	// network error the driver reports it as.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, inventory.ErrOutcomeUnknown) {
		return err
	}
	switch {
	case errors.Is(err, gorm.ErrDuplicatedKey):
		return fmt.Errorf("%w: %w", inventory.ErrAlreadyPurchased, err)
	case errors.Is(err, gorm.ErrRecordNotFound):
		return fmt.Errorf("%w: %w", inventory.ErrNotFound, err)
	}
	var me *mysqldriver.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case mysqlDuplicate:
			return fmt.Errorf("%w: %w", inventory.ErrAlreadyPurchased, err)
		case mysqlCheckViolation, mariaCheckViolation, mysqlOutOfRange, mysqlUnsignedRange:
			return fmt.Errorf("%w (stock constraint): %w", inventory.ErrSoldOut, err)
		case mysqlTooManyConns, mysqlUserConns, mysqlUserLimit:
			// The server is full: load, not a bug, and nothing was written.
			return fmt.Errorf("%w: %w", inventory.ErrOverloaded, err)
		}
		return err
	}
	var se *gosqlite.Error
	if errors.As(err, &se) {
		if se.Code() == sqliteCheck {
			return fmt.Errorf("%w (stock constraint): %w", inventory.ErrSoldOut, err)
		}
		return err
	}
	var ne net.Error
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysqldriver.ErrInvalidConn) || errors.As(err, &ne) {
		return fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
	}
	return err
}

// commitLost marks err, from a step that sends a COMMIT, as
// inventory.ErrOutcomeUnknown when the connection broke after the step was
// sent: MySQL may have committed. driver.ErrBadConn means the driver sent
// nothing, and a MySQL error means the server answered; both stay as they
// are.
func commitLost(err error) error {
	var me *mysqldriver.MySQLError
	if err == nil || errors.Is(err, driver.ErrBadConn) || errors.As(err, &me) {
		return err
	}
	var ne net.Error
	if errors.Is(err, mysqldriver.ErrInvalidConn) || errors.As(err, &ne) {
		return fmt.Errorf("%w: %w", inventory.ErrOutcomeUnknown, err)
	}
	return err
}

// retryable reports whether a transaction failed only because InnoDB chose
// it as a deadlock victim or timed out a row lock, so it may run again.
func retryable(err error) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && (me.Number == mysqlDeadlock || me.Number == mysqlLockWait)
}
