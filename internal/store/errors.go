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

// Driver error numbers the store understands.
const (
	mysqlDupKey         = 1062 // ER_DUP_ENTRY
	mysqlLockWait       = 1205 // ER_LOCK_WAIT_TIMEOUT
	mysqlDeadlock       = 1213 // ER_LOCK_DEADLOCK
	mysqlOutOfRange     = 1264 // ER_WARN_DATA_OUT_OF_RANGE
	mysqlUnsignedRange  = 1690 // ER_DATA_OUT_OF_RANGE
	mysqlCheckViolation = 3819 // ER_CHECK_CONSTRAINT_VIOLATED (MySQL 8)
	mariaCheckViolation = 4025 // ER_CONSTRAINT_FAILED (MariaDB)

	sqliteCheck      = 275  // SQLITE_CONSTRAINT_CHECK
	sqlitePrimaryKey = 1555 // SQLITE_CONSTRAINT_PRIMARYKEY
	sqliteUnique     = 2067 // SQLITE_CONSTRAINT_UNIQUE
)

// translate maps driver errors to inventory sentinels, keeping the original
// in the chain: a duplicate (item, user) is ErrAlreadyPurchased, a stock
// CHECK or range violation is ErrSoldOut (the constraint stopped an
// oversell), a broken connection is ErrUnavailable.
func translate(err error) error {
	if err == nil {
		return nil
	}
	// A query cut off by the request's deadline is a timeout, whatever
	// network error the driver reports it as.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err
	}
	var me *mysqldriver.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case mysqlDupKey:
			return fmt.Errorf("%w: %w", inventory.ErrAlreadyPurchased, err)
		case mysqlCheckViolation, mariaCheckViolation, mysqlOutOfRange, mysqlUnsignedRange:
			return fmt.Errorf("%w (stock constraint): %w", inventory.ErrSoldOut, err)
		}
		return err
	}
	var se *gosqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqliteUnique, sqlitePrimaryKey:
			return fmt.Errorf("%w: %w", inventory.ErrAlreadyPurchased, err)
		case sqliteCheck:
			return fmt.Errorf("%w (stock constraint): %w", inventory.ErrSoldOut, err)
		}
		return err
	}
	var ne net.Error
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysqldriver.ErrInvalidConn) || errors.As(err, &ne) {
		return fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
	}
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return fmt.Errorf("%w: %w", inventory.ErrNotFound, err)
	}
	return err
}

// retryable reports whether a transaction failed only because InnoDB chose
// it as a deadlock victim or timed out a row lock, so it may run again.
func retryable(err error) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && (me.Number == mysqlDeadlock || me.Number == mysqlLockWait)
}
