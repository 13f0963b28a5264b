package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/internal/config"
)

func TestVersionNamesModuleCommitAndToolchain(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"version"}, func(string) string { return "" }, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(out.String())
	for _, want := range []string{"github.com/seckill-lab/seckill", " commit ", runtime.Version()} {
		if !strings.Contains(line, want) {
			t.Errorf("seckill version printed %q, which lacks %q", line, want)
		}
	}
	if err := run(context.Background(), []string{"version", "extra"}, func(string) string { return "" }, &out, &errOut); err == nil {
		t.Error("version took a stray argument")
	}
}

func TestVersionLinePrefersTheStampedCommit(t *testing.T) {
	info := &debug.BuildInfo{Main: debug.Module{Path: "example.com/m", Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "aaaa"}, {Key: "vcs.modified", Value: "true"},
	}}
	cases := []struct {
		info    *debug.BuildInfo
		stamped string
		want    string
	}{
		{info, "", "example.com/m v1.2.3 commit aaaa+dirty "},
		{info, "bbbb+dirty", "example.com/m v1.2.3 commit bbbb+dirty "},
		{info, "cccc", "example.com/m v1.2.3 commit cccc "},
		{&debug.BuildInfo{Main: debug.Module{Path: "example.com/m", Version: "(devel)"}}, "", "example.com/m (devel) commit unknown "},
		{nil, "", "commit unknown "},
	}
	for _, c := range cases {
		if got := versionLine(c.info, c.stamped); !strings.Contains(got, c.want) {
			t.Errorf("versionLine(stamped %q) = %q, want it to contain %q", c.stamped, got, c.want)
		}
	}
}

// TestMakeBuildStampsTheCommit: `make build` passes COMMIT to the linker
// under the name the binary reads, so a renamed variable cannot silently
// turn every version into "commit unknown".
func TestMakeBuildStampsTheCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary with make")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on this machine")
	}
	bin := filepath.Join(t.TempDir(), "seckill")
	mk := exec.Command("make", "-s", "build", "BIN="+bin, "COMMIT=c0ffee5eed42")
	mk.Dir = filepath.Join("..", "..")
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("seckill version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), " commit c0ffee5eed42 ") {
		t.Fatalf("seckill version of a make build with COMMIT=c0ffee5eed42 printed %q", out)
	}
}

// TestTokenIsMadeOnceAndKept: the first run writes a random token (0600)
// and prints it, a second prints the same one, SECKILL_ADMIN_TOKEN wins
// without writing, and what it writes is what config reads back.
func TestTokenIsMadeOnceAndKept(t *testing.T) {
	file := filepath.Join(t.TempDir(), "admin-token")
	env := map[string]string{"SECKILL_ADMIN_TOKEN_FILE": file}
	getenv := func(k string) string { return env[k] }
	tokenOf := func() string {
		t.Helper()
		var out bytes.Buffer
		if err := run(context.Background(), []string{"token"}, getenv, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(out.String())
		if len(f) < 3 || f[0] != "admin" {
			t.Fatalf("token printed %q", out.String())
		}
		return f[2]
	}
	first := tokenOf()
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v, want mode 0600", st, err)
	}
	if again := tokenOf(); again != first {
		t.Errorf("a second run printed %q, want the kept %q", again, first)
	}
	cfg, err := config.Load(getenv)
	if err != nil || cfg.AdminToken != first {
		t.Errorf("config read %q (%v) from the file, want %q", cfg.AdminToken, err, first)
	}
	env["SECKILL_ADMIN_TOKEN"] = "chosen-by-the-user"
	if got := tokenOf(); got != "chosen-by-the-user" {
		t.Errorf("with SECKILL_ADMIN_TOKEN set, token printed %q", got)
	}
	if b, _ := os.ReadFile(file); strings.TrimSpace(string(b)) != first {
		t.Errorf("SECKILL_ADMIN_TOKEN must not overwrite the file: %q", b)
	}
	if err := run(context.Background(), []string{"token"}, func(string) string { return "" }, io.Discard, io.Discard); err == nil {
		t.Error("token with no file and no variable succeeded")
	}
	// A file without a usable token is replaced, and the output says so.
	if err := os.WriteFile(file, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	delete(env, "SECKILL_ADMIN_TOKEN")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"token"}, getenv, &out, io.Discard); err != nil || !strings.Contains(out.String(), "was replaced") {
		t.Errorf("a short token in the file: %v, printed %q; want a new token and a word that it replaced one", err, out.String())
	}
}
