package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
)

// lintDir holds the linter: Redocly CLI, pinned by package-lock.json,
// installed by `npm ci --prefix internal/api/lint` (.ci/run does it).
const lintDir = "lint"

// lintResult is what `redocly lint --format=json` prints.
type lintResult struct {
	Totals struct {
		Errors   int `json:"errors"`
		Warnings int `json:"warnings"`
		Ignored  int `json:"ignored"`
	} `json:"totals"`
	Version  string `json:"version"`
	Problems []struct {
		RuleID   string `json:"ruleId"`
		Severity string `json:"severity"`
		Message  string `json:"message"`
		Location []struct {
			Pointer string `json:"pointer"`
		} `json:"location"`
	} `json:"problems"`
}

// TestOpenAPIPassesTheLinter lints the published document (the generated
// internal/api/openapi.json, as compiled in) with Redocly CLI's
// recommended rules (lint/redocly.yaml): not one error or warning. Among
// them, security-defined fails an operation that does not say who may
// call it, so a new route cannot leave that unstated, and
// no-unused-components fails an answer or header that nothing uses.
//
// Without node or the installed linter the test skips, saying how to
// install it, except under CI=true, where it fails.
func TestOpenAPIPassesTheLinter(t *testing.T) {
	cli := filepath.Join(lintDir, "node_modules", "@redocly", "cli", "bin", "cli.js")
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(cli)
	}
	if err != nil {
		msg := "the OpenAPI linter is not installed (" + err.Error() + "): install Node.js 20.19 or later, then run `npm ci --prefix internal/api/lint`"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	doc := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(doc, api.OpenAPI, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, cli, "lint", "--config", filepath.Join(lintDir, "redocly.yaml"), "--format=json", doc)
	// No telemetry and no update check: the linter runs offline.
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		t.Fatalf("running the linter: %v\n%s", runErr, stderr.String())
	}
	var res lintResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("the linter's output is not its JSON report (%v; exit %v):\n%s\n%s", err, runErr, stdout.String(), stderr.String())
	}
	for _, p := range res.Problems {
		var where []string
		for _, l := range p.Location {
			where = append(where, l.Pointer)
		}
		t.Errorf("%s %s at %s: %s", p.Severity, p.RuleID, strings.Join(where, ", "), p.Message)
	}
	if res.Totals.Errors+res.Totals.Warnings+res.Totals.Ignored != 0 || runErr != nil {
		t.Errorf("Redocly CLI %s: %d errors, %d warnings, %d ignored (exit %v); want none", res.Version, res.Totals.Errors, res.Totals.Warnings, res.Totals.Ignored, runErr)
	}
}
