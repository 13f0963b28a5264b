// Package verdict judges a row of the lab: a table of named rules, each a
// small function that says why a row broke it (rules.go), the notes a row
// carries beside them (notes.go), and the cross-check that counts the
// item's orders and stock in MySQL itself, without the service in between
// (mysql.go). The lab exits non-zero when a row fails, so a workshop and
// CI can both rely on the names of the rules: keep them.
package verdict
