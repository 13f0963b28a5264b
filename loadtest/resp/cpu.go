package resp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-lab/seckill/internal/config"
)

// dial connects to the Redis at addr: host:port, or unix:/path for a
// Redis on this machine that listens on a Unix socket.
func dial(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	network, a := config.RedisNetAddr(addr)
	return d.DialContext(ctx, network, a)
}

// CPU asks the Redis at addr for INFO CPU, on a connection of its
// own, and returns used_cpu_sys + used_cpu_user. The lab speaks the two
// commands it needs in RESP itself: go-redis stays out of the lab.
func CPU(ctx context.Context, addr, password string, timeout time.Duration) (float64, error) {
	conn, err := dial(ctx, addr, timeout)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	rd := bufio.NewReader(conn)
	if password != "" {
		if _, err := conn.Write(Command("AUTH", password)); err != nil {
			return 0, err
		}
		if _, err := readString(rd); err != nil {
			return 0, fmt.Errorf("AUTH: %w", err)
		}
	}
	if _, err := conn.Write(Command("INFO", "cpu")); err != nil {
		return 0, err
	}
	info, err := readString(rd)
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: %w", err)
	}
	return parseCPU(info)
}

// parseCPU adds used_cpu_sys and used_cpu_user of an INFO answer.
func parseCPU(info string) (float64, error) {
	var sys, user float64
	var haveSys, haveUser bool
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		var dst *float64
		switch k {
		case "used_cpu_sys":
			dst, haveSys = &sys, true
		case "used_cpu_user":
			dst, haveUser = &user, true
		default:
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %s is %q", k, v)
		}
		*dst = f
	}
	if !haveSys || !haveUser {
		return 0, errors.New("INFO cpu lacks used_cpu_sys or used_cpu_user")
	}
	return sys + user, nil
}
