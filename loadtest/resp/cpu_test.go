package resp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestParseRedisCPU: INFO CPU's used_cpu_sys and used_cpu_user are added;
// an answer without them, or with a bad number, is an error, never 0.
func TestParseRedisCPU(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:9.000000\r\nused_cpu_sys_main_thread:1.000000\r\n"
	if got, err := parseCPU(info); err != nil || got != 3.75 {
		t.Fatalf("got %v, %v; want 3.75 s", got, err)
	}
	for name, bad := range map[string]string{
		"no user":    "# CPU\r\nused_cpu_sys:1.0\r\n",
		"empty":      "",
		"bad number": "used_cpu_sys:x\r\nused_cpu_user:1\r\n",
	} {
		if got, err := parseCPU(bad); err == nil {
			t.Errorf("%s: got %v, want an error", name, got)
		}
	}
}

// fakeRedis answers each command a connection sends with the next reply
// of replies, and records the commands.
func fakeRedis(t *testing.T, replies ...string) (string, *[]string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var got []string
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		rd := bufio.NewReader(conn)
		for _, reply := range replies {
			cmd, err := readCommand(rd)
			if err != nil {
				return
			}
			got = append(got, cmd)
			if _, err := conn.Write([]byte(reply)); err != nil {
				return
			}
		}
	}()
	return ln.Addr().String(), &got
}

// readCommand reads one RESP array of bulk strings, joined by spaces.
func readCommand(rd *bufio.Reader) (string, error) {
	var n int
	if _, err := fmt.Fscanf(rd, "*%d\r\n", &n); err != nil {
		return "", err
	}
	var args []string
	for range n {
		var l int
		if _, err := fmt.Fscanf(rd, "$%d\r\n", &l); err != nil {
			return "", err
		}
		buf := make([]byte, l+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		args = append(args, string(buf[:l]))
	}
	return strings.Join(args, " "), nil
}

// TestRedisCPUOverRESP: the lab authenticates when given a password, asks
// INFO cpu, and reads the bulk answer; an error reply is an error.
func TestRedisCPUOverRESP(t *testing.T) {
	body := "# CPU\r\nused_cpu_sys:0.5\r\nused_cpu_user:0.25\r\n"
	addr, cmds := fakeRedis(t, "+OK\r\n", fmt.Sprintf("$%d\r\n%s\r\n", len(body), body))
	got, err := CPU(context.Background(), addr, "s3cret", 5*time.Second)
	if err != nil || got != 0.75 {
		t.Fatalf("got %v, %v; want 0.75 s", got, err)
	}
	if strings.Join(*cmds, "|") != "AUTH s3cret|INFO cpu" {
		t.Errorf("commands %q, want AUTH then INFO cpu", *cmds)
	}

	addr, _ = fakeRedis(t, "-NOAUTH Authentication required.\r\n")
	if got, err := CPU(context.Background(), addr, "", 5*time.Second); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("got %v, %v; want the NOAUTH error", got, err)
	}
}

// TestRedisCPUOverAUnixSocket: --cpu-redis unix:/path reads a Redis that
// listens on a Unix socket only.
func TestRedisCPUOverAUnixSocket(t *testing.T) {
	sock := testenv.StartRedisUnix(t)
	got, err := CPU(context.Background(), "unix:"+sock, "", 5*time.Second)
	if err != nil || got <= 0 {
		t.Fatalf("INFO CPU over unix:%s: %v, %v; want a positive CPU time", sock, got, err)
	}
}
