// Package schema embeds the SQL files of this folder, the source of truth
// for seckill's tables. mysql/ serves MySQL 8 and MariaDB (and is mounted by
// docker-compose.yml); sqlite/ serves the embedded demo database.
package schema

import "embed"

// Files holds mysql/*.sql and sqlite/*.sql, applied in name order.
//
//go:embed mysql/*.sql sqlite/*.sql
var Files embed.FS
