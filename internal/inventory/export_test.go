package inventory

// ErrMayReturnForTest lets the external tests build the sell-out that
// redis-atomic reports while reserved units may still come back.
var ErrMayReturnForTest = errMayReturn
