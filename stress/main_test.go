package main

import (
	"strings"
	"testing"
)

// The bare environment has no SECKILL_TEST_* and no CI (under which testenv
// never falls back to the embedded Redis); without Docker it names a socket
// that does not exist. The local one needs both addresses.
func TestEnvironments(t *testing.T) {
	given := []string{"PATH=/bin", "SECKILL_TEST_MYSQL_DSN=root:@tcp(127.0.0.1:3306)/test",
		"SECKILL_TEST_REDIS_ADDR=127.0.0.1:6379", "CI=true", "DOCKER_HOST=tcp://docker:2375"}
	for _, c := range []struct {
		env      string
		noDocker bool
		want     string
	}{
		{"local", false, strings.Join(given, " ")},
		{"bare", false, "PATH=/bin DOCKER_HOST=tcp://docker:2375"},
		{"bare", true, "PATH=/bin DOCKER_HOST=unix:///nonexistent.sock"},
	} {
		got, err := environment(c.env, given, c.noDocker)
		if err != nil || strings.Join(got, " ") != c.want {
			t.Errorf("%s (no Docker %v): %q, %v; want %q", c.env, c.noDocker, got, err, c.want)
		}
	}
	if _, err := environment("local", []string{"SECKILL_TEST_MYSQL_DSN=x", "SECKILL_TEST_REDIS_ADDR="}, false); err == nil {
		t.Error("local without SECKILL_TEST_REDIS_ADDR: no error")
	}
}

// STRESS_PKGS and STRESS_RUN narrow the list; a suite of every test keeps
// STRESS_RUN as its -run.
func TestOptionsNarrowTheList(t *testing.T) {
	env := map[string]string{
		"STRESS_PKGS": "internal/lock/, ./internal/pitfalls",
		"STRESS_RUN":  "^TestMiniredis$",
	}
	o, err := parseOptions(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range o.suites {
		got = append(got, s.pkg+": "+s.runRegexp())
	}
	if want := "./internal/lock: ^(TestMiniredis)$ ./internal/pitfalls: ^TestMiniredis$"; strings.Join(got, " ") != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if o.count != 10 || o.hogs != 2 || strings.Join(o.envs, " ") != "local bare" {
		t.Errorf("defaults: %+v", o)
	}
	for _, bad := range []map[string]string{
		{"STRESS_COUNT": "0"}, {"STRESS_HOGS": "-1"}, {"STRESS_ENV": "ci"},
		{"STRESS_PKGS": "./internal/config"}, {"STRESS_RUN": "("}, {"STRESS_RUN": "^TestNoSuchTest$", "STRESS_PKGS": "./internal/lock"},
	} {
		if _, err := parseOptions(func(k string) string { return bad[k] }); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
