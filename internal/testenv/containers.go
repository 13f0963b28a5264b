package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"
	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"

	"github.com/seckill-lab/seckill/internal/store"
)

// The images docker-compose.yml runs, so tests and the fleet meet the same
// servers. deploy's tests fail when the two disagree.
const (
	MySQLImage = "mysql:8.4"
	RedisImage = "redis:7.4-alpine"
)

// ContainerLabel marks every container this package starts. A test binary
// killed before its reaper ran leaves them behind; remove them with
//
//	docker rm -f $(docker ps -aq --filter label=org.seckill.testenv)
const ContainerLabel = "org.seckill.testenv"

// startupLimit bounds the start of one container, first start of an image
// on a busy 2-core machine included (MySQL initialises its data directory).
const startupLimit = 3 * time.Minute

// ErrNoDocker means no Docker engine answered; the test falls back or skips.
var ErrNoDocker = errors.New("no Docker engine answers")

// shared is one container per test binary: started by the first test that
// asks, handed to every later one, removed when the binary exits.
type shared struct {
	once sync.Once
	addr string // host:port, or a DSN for MySQL
	err  error
	// reaper's stdin: the reaper removes the container when this end closes,
	// which the kernel does when the test binary exits, however it exits.
	// Held here so that the garbage collector never closes it early.
	reaper *os.File
}

var (
	docker struct {
		once sync.Once
		err  error
	}
	mysqlContainer shared
	redisContainer shared
)

// dockerAvailable reports whether a Docker engine answers, once per test
// binary. A DOCKER_HOST that does not answer means no Docker, even where
// the default socket would: the variable is the user's choice (and how a
// test run simulates a machine without Docker).
func dockerAvailable() error {
	docker.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			docker.err = fmt.Errorf("%w: %v", ErrNoDocker, err)
			return
		}
		defer cli.Close()
		if _, err := cli.Ping(ctx); err != nil {
			docker.err = fmt.Errorf("%w at %s: %v", ErrNoDocker, cli.DaemonHost(), err)
			return
		}
		// testenv removes its containers itself (see reap), so the Ryuk
		// reaper, whose image must come from a registry, is not needed.
		// An explicit setting is left alone.
		if _, set := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !set && canReap() {
			docker.err = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
		}
	})
	return docker.err
}

// localDaemon reports whether the engine runs on this machine, so that
// published ports can stay on loopback.
func localDaemon() bool {
	host := os.Getenv("DOCKER_HOST")
	return host == "" || strings.HasPrefix(host, "unix://")
}

// startContainer runs image with one exposed port, published on a free
// host port (on loopback when the engine is local), and returns the
// container and the host:port that reaches the exposed port.
func startContainer(ctx context.Context, sh *shared, image, port string, opts ...testcontainers.ContainerCustomizer) (*testcontainers.DockerContainer, string, error) {
	spec := port + "/tcp"
	if localDaemon() {
		spec = "127.0.0.1::" + spec
	}
	opts = append(opts,
		testcontainers.WithExposedPorts(spec),
		testcontainers.WithLabels(map[string]string{ContainerLabel: "1"}),
	)
	c, err := testcontainers.Run(ctx, image, opts...)
	if c != nil {
		// Reap whatever was created, started or not.
		sh.reaper = reap(c.GetContainerID())
	}
	if err != nil {
		return c, "", fmt.Errorf("start %s: %w", image, err)
	}
	mapped, err := c.MappedPort(ctx, nat.Port(port+"/tcp"))
	if err != nil {
		return c, "", fmt.Errorf("%s: mapped port: %w", image, err)
	}
	host := "127.0.0.1"
	if !localDaemon() {
		if host, err = c.Host(ctx); err != nil {
			return c, "", fmt.Errorf("%s: host: %w", image, err)
		}
	}
	return c, net.JoinHostPort(host, mapped.Port()), nil
}

// canReap reports whether reap can work here.
func canReap() bool {
	for _, tool := range []string{"sh", "docker"} {
		if _, err := exec.LookPath(tool); err != nil {
			return false
		}
	}
	return true
}

// reap starts a small process that removes container id once the test
// binary has exited. It waits for end of file on a pipe whose write end
// only this process holds: the kernel closes it at exit, also on a panic,
// a timeout or SIGKILL, where no cleanup of ours would run. It runs in its
// own process group so that the ^C which ends the tests does not end it
// first. Without sh and the docker CLI it does nothing, and Ryuk (when
// enabled) is what removes the container.
func reap(id string) *os.File {
	if !canReap() {
		return nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil
	}
	cmd := exec.Command("sh", "-c", `cat >/dev/null; exec docker rm -f -v "$1" >/dev/null 2>&1`, "testenv-reaper", id)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		return nil
	}
	_ = r.Close() // the reaper has its own copy
	// Never waited for: it outlives this process by design.
	_ = cmd.Process.Release()
	return w
}

// containerLogs returns the tail of a container's output, for errors.
func containerLogs(ctx context.Context, c *testcontainers.DockerContainer) string {
	if c == nil {
		return ""
	}
	rc, err := c.Logs(ctx)
	if err != nil {
		return fmt.Sprintf("(logs: %v)", err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, 1<<20)) // what arrived is what we show
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// pollUntil calls try until it succeeds or ctx ends, and returns the last
// error in that case.
func pollUntil(ctx context.Context, try func(context.Context) error) error {
	for {
		attempt, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := try(attempt)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// mysqlGrant lets the container's user create a database per test, and
// grant a user of its own on one (TestDatabaseOutOfConnectionsIsOverload
// makes a user with few connections): hence WITH GRANT OPTION. It is
// run by the image's entrypoint as root on first start, in mysql:8.4 and
// in its stand-in alike.
const mysqlGrant = "GRANT ALL PRIVILEGES ON *.* TO 'seckill'@'%' WITH GRANT OPTION;\n"

// containerMySQL returns the DSN of a MySQL server in a container, started
// on the first call of the test binary.
func containerMySQL() (string, error) {
	sh := &mysqlContainer
	sh.once.Do(func() {
		if sh.err = dockerAvailable(); sh.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), startupLimit)
		defer cancel()
		password := Name("pw")
		c, addr, err := startContainer(ctx, sh, MySQLImage, "3306",
			testcontainers.WithEnv(map[string]string{
				"MYSQL_RANDOM_ROOT_PASSWORD": "yes",
				"MYSQL_DATABASE":             "seckill",
				"MYSQL_USER":                 "seckill",
				"MYSQL_PASSWORD":             password,
			}),
			testcontainers.WithFiles(testcontainers.ContainerFile{
				Reader:            strings.NewReader(mysqlGrant),
				ContainerFilePath: "/docker-entrypoint-initdb.d/000-testenv-grant.sql",
				FileMode:          0o644,
			}),
			// Test data need not survive the container: skip the disk.
			testcontainers.WithTmpfs(map[string]string{"/var/lib/mysql": "rw"}),
		)
		if err != nil {
			sh.err = fmt.Errorf("%w\n%s", err, containerLogs(ctx, c))
			return
		}
		cfg := mysqldriver.NewConfig()
		cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = "seckill", password, "tcp", addr, "seckill"
		dsn := cfg.FormatDSN()
		// The image runs a socket-only server while it initialises, and the
		// published port accepts connections before anything listens. So
		// wait for the server's greeting on a bare connection (the driver
		// would log every refused attempt), then for a query to pass.
		err = pollUntil(ctx, func(ctx context.Context) error { return mysqlGreets(ctx, addr) })
		if err == nil {
			err = pollUntil(ctx, func(ctx context.Context) error {
				db, err := store.OpenMySQL(ctx, dsn, store.Pool{})
				if err != nil {
					return err
				}
				return db.Close()
			})
		}
		if err != nil {
			sh.err = fmt.Errorf("%s in a container never answered at %s: %w\n%s", MySQLImage, addr, err, containerLogs(ctx, c))
			return
		}
		sh.addr = dsn
	})
	return sh.addr, sh.err
}

// mysqlGreets reports whether a MySQL server answers at addr: it speaks
// first, with a handshake packet, as soon as a client connects.
func mysqlGreets(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetReadDeadline(deadline); err != nil {
			return err
		}
	}
	var header [4]byte // length (3 bytes) and sequence number
	if _, err := io.ReadFull(conn, header[:]); err != nil {
		return fmt.Errorf("no greeting: %w", err)
	}
	return nil
}

// containerRedis returns the address of a Redis server in a container,
// started on the first call of the test binary.
func containerRedis() (string, error) {
	sh := &redisContainer
	sh.once.Do(func() {
		if sh.err = dockerAvailable(); sh.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), startupLimit)
		defer cancel()
		c, addr, err := startContainer(ctx, sh, RedisImage, "6379",
			testcontainers.WithCmd("redis-server", "--save", "", "--appendonly", "no"),
		)
		if err != nil {
			sh.err = fmt.Errorf("%w\n%s", err, containerLogs(ctx, c))
			return
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		if err := pollUntil(ctx, func(ctx context.Context) error { return rdb.Ping(ctx).Err() }); err != nil {
			sh.err = fmt.Errorf("%s in a container never answered at %s: %w\n%s", RedisImage, addr, err, containerLogs(ctx, c))
			return
		}
		sh.addr = addr
	})
	return sh.addr, sh.err
}

// dockerHint says how Docker was (not) found, for skip messages.
func dockerHint(err error) string {
	if errors.Is(err, ErrNoDocker) {
		host := os.Getenv("DOCKER_HOST")
		if host == "" {
			host = client.DefaultDockerHost
		}
		if u, perr := url.Parse(host); perr == nil && u.Scheme == "unix" {
			host = u.Path
		}
		return fmt.Sprintf("no Docker engine at %s either", host)
	}
	return fmt.Sprintf("Docker answers but the container did not start: %v", err)
}
