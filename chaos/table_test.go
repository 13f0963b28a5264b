package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// writeTable gathers every figures file of this run into one Markdown
// table, test-artifacts/chaos/table.md, in the shape RELIABILITY.md uses.
func writeTable() {
	files, err := filepath.Glob(filepath.Join(artifacts, "*.json"))
	if err != nil || len(files) == 0 {
		return
	}
	sort.Strings(files)
	var b strings.Builder
	b.WriteString("| Fault | Stage | Requests | 201 | Refused | Unknown | Oversold | Lost | Phantom | p99 during fault | Verdict | Reproduce |\n")
	b.WriteString("|---|---|---:|---:|---|---:|---:|---:|---:|---:|---|---|\n")
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		var f figures
		if json.Unmarshal(raw, &f) != nil || f.Test == "" {
			continue
		}
		var refused []string
		for _, k := range sortedKeys(f.Refused) {
			refused = append(refused, fmt.Sprintf("%d %s", f.Refused[k], k))
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %d | %d | %d | %d | %d ms | %s (%s) | `%s` |\n",
			f.Fault, f.Stage, f.Requests, f.Successes, strings.Join(refused, ", "), f.Unknown+f.NotSent,
			f.Oversold, f.Lost, f.Phantom, f.P99FaultMs, f.Verdict, f.Form, f.Command)
	}
	_ = os.WriteFile(filepath.Join(artifacts, "table.md"), []byte(b.String()), 0o644) // a by-product
}
