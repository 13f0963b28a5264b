package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// The fleet docker-compose.yml must describe at least. More replicas may be
// added (see docs/docker.md); the checks below cover every service built
// from this repo, not only these three.
var (
	replicas = []string{"app-1", "app-2", "app-3"}
	// redisServers are RedLock's independent servers; appRedis is the
	// app's own Redis.
	redisServers = []string{"redis-1", "redis-2", "redis-3"}
	appRedis     = "redis"
	allServices  = append(append([]string{"mysql", "nginx", appRedis}, replicas...), redisServers...)
)

// hostPorts are the ports the lab and the browser use on the host, and the
// variables that move them.
var hostPorts = map[string]struct{ port, variable string }{
	"nginx": {"8080", "SECKILL_NGINX_PORT"},
	"app-1": {"8081", "SECKILL_APP1_PORT"},
	"app-2": {"8082", "SECKILL_APP2_PORT"},
	"app-3": {"8083", "SECKILL_APP3_PORT"},
}

// testToken stands in for the admin token the token service would write:
// config.Load cannot read the volume's file here.
const testToken = "compose-test-token"

// loadProject parses ../docker-compose.yml as Docker Compose would, with
// interpolation against env only: neither the OS environment nor a .env file
// leaks in, so the test sees the defaults a newcomer gets. The admin token,
// which has no default, is testToken unless env sets it.
func loadProject(t *testing.T, env map[string]string) *types.Project {
	t.Helper()
	if _, ok := env["SECKILL_ADMIN_TOKEN"]; !ok {
		env = maps.Clone(env)
		if env == nil {
			env = map[string]string{}
		}
		env["SECKILL_ADMIN_TOKEN"] = testToken
	}
	p, err := loadProjectErr(env)
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}
	return p
}

// loadProjectErr is loadProject for tests of what fails to load. files,
// when given, are the compose files (in the repo root) instead of
// docker-compose.yml alone.
func loadProjectErr(env map[string]string, files ...string) (*types.Project, error) {
	pairs := make([]string, 0, len(env))
	for k, v := range env {
		pairs = append(pairs, k+"="+v)
	}
	if len(files) == 0 {
		files = []string{"docker-compose.yml"}
	}
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = filepath.Join("..", f)
	}
	opts, err := cli.NewProjectOptions(
		paths,
		cli.WithEnv(pairs),
		cli.WithInterpolation(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		return nil, fmt.Errorf("compose options: %w", err)
	}
	return opts.LoadProject(context.Background())
}

// builtImages returns the images of the services built from this repo.
func builtImages(p *types.Project) []string {
	var images []string
	for _, s := range p.Services {
		if s.Build != nil {
			images = append(images, s.Image)
		}
	}
	return images
}

// appServices returns the sorted names of the services that serve the
// image built from this repo: the app replicas, however many there are
// (the one-shot token and story services run it too, other commands).
func appServices(p *types.Project) []string {
	built := builtImages(p)
	var names []string
	for name, s := range p.Services {
		if (s.Build != nil || (s.Image != "" && slices.Contains(built, s.Image))) && slices.Equal(s.Command, types.ShellCommand{"serve"}) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("service %s: %v", name, err)
	}
	return s
}

// getenv turns a service's resolved environment into the getenv config.Load
// takes. A variable listed without a value would be taken from the host at
// `docker compose up`, which the test cannot see, so it fails here.
func getenv(t *testing.T, s types.ServiceConfig) func(string) string {
	t.Helper()
	env := map[string]string{}
	for k, v := range s.Environment {
		if v == nil {
			t.Errorf("%s: %s has no value in docker-compose.yml", s.Name, k)
			continue
		}
		env[k] = *v
	}
	return func(k string) string { return env[k] }
}

// appConfig loads a replica's configuration exactly as `seckill serve` would.
func appConfig(t *testing.T, p *types.Project, name string) config.Config {
	t.Helper()
	cfg, err := config.Load(getenv(t, service(t, p, name)))
	if err != nil {
		t.Fatalf("%s: config.Load rejects its environment:\n%v", name, err)
	}
	return cfg
}

// addrPort returns the port of a listen address such as ":8081".
func addrPort(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("SECKILL_ADDR %q: %v", addr, err)
	}
	return port
}

func TestComposeServicesExist(t *testing.T) {
	p := loadProject(t, nil)
	for _, name := range allServices {
		service(t, p, name)
	}
	if apps := appServices(p); !slices.Equal(apps[:min(len(apps), len(replicas))], replicas) {
		t.Errorf("services built from this repo are %v, want at least %v", apps, replicas)
	}
}

func TestComposeVariablesAreKnownToConfig(t *testing.T) {
	p := loadProject(t, nil)
	known := config.EnvNames()
	for _, s := range p.Services {
		for k := range s.Environment {
			if strings.HasPrefix(k, "SECKILL_") && !slices.Contains(known, k) {
				t.Errorf("%s sets %s, which config.Load never reads (known: %s)", s.Name, k, strings.Join(known, ", "))
			}
		}
	}
}

func TestComposeReplicaConfigLoads(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		mode string
	}{
		{name: "defaults", env: nil, mode: "redis-lock"},
		{name: "overridden", env: map[string]string{"SECKILL_STAGE": "db-atomic", "SECKILL_ADMIN_TOKEN": "another-long-token"}, mode: "db-atomic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := loadProject(t, tc.env)
			var peers []string
			for _, name := range appServices(p) {
				cfg := appConfig(t, p, name)
				peers = append(peers, fmt.Sprintf("http://%s:%s", name, addrPort(t, cfg.Addr)))
				if cfg.Instance != name {
					t.Errorf("%s: SECKILL_INSTANCE = %q, want the service name", name, cfg.Instance)
				}
				if cfg.Stage != tc.mode {
					t.Errorf("%s: SECKILL_STAGE = %q, want %q", name, cfg.Stage, tc.mode)
				}
				if len(cfg.AdminToken) < 8 {
					t.Errorf("%s: SECKILL_ADMIN_TOKEN is unset or short, so the lab cannot reset stock", name)
				}
				if cfg.CriticalSectionDelay <= 0 {
					t.Errorf("%s: SECKILL_CRITICAL_SECTION_DELAY = %s; the demo needs a race window", name, cfg.CriticalSectionDelay)
				}
			}
			slices.Sort(peers)
			for _, name := range appServices(p) {
				if got := slices.Sorted(slices.Values(appConfig(t, p, name).Peers)); !slices.Equal(got, peers) {
					t.Errorf("%s: SECKILL_PEERS = %v, want every replica: %v", name, got, peers)
				}
			}
		})
	}
}

func TestComposeReplicasReachTheirBackends(t *testing.T) {
	p := loadProject(t, nil)
	mysql := service(t, p, "mysql")
	db := getenv(t, mysql)
	for _, name := range appServices(p) {
		cfg := appConfig(t, p, name)

		dsn, err := mysqldriver.ParseDSN(cfg.MySQLDSN)
		if err != nil {
			t.Fatalf("%s: SECKILL_MYSQL_DSN: %v", name, err)
		}
		if dsn.Net != "tcp" || dsn.Addr != "mysql:3306" {
			t.Errorf("%s: SECKILL_MYSQL_DSN reaches %s(%s), want tcp(mysql:3306)", name, dsn.Net, dsn.Addr)
		}
		if dsn.User != db("MYSQL_USER") || dsn.Passwd != db("MYSQL_PASSWORD") || dsn.DBName != db("MYSQL_DATABASE") {
			t.Errorf("%s: SECKILL_MYSQL_DSN user/password/database differ from the mysql service's MYSQL_USER/MYSQL_PASSWORD/MYSQL_DATABASE", name)
		}
		// go-sql-driver sends every parameter it does not know as a session
		// variable, so a stray one (say allowPublicKeyRetrieval, which this
		// driver does not have) would fail every connection.
		if len(dsn.Params) > 0 {
			t.Errorf("%s: SECKILL_MYSQL_DSN has parameters the driver would send to MySQL as SET: %v", name, dsn.Params)
		}

		if len(cfg.RedisAddrs) != 1 || cfg.RedisAddrs[0] != appRedis+":6379" {
			t.Errorf("%s: SECKILL_REDIS_ADDR = %v, want [%s:6379], the app's own Redis", name, cfg.RedisAddrs, appRedis)
		}
		var hosts []string
		for _, addr := range cfg.RedlockAddrs {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				t.Fatalf("%s: SECKILL_REDLOCK_ADDRS %q: %v", name, addr, err)
			}
			hosts = append(hosts, host)
		}
		if slices.Sort(hosts); !slices.Equal(hosts, redisServers) {
			t.Errorf("%s: SECKILL_REDLOCK_ADDRS hosts = %v, want the independent servers %v", name, hosts, redisServers)
		}
	}
}

// TestComposeRedisRoles: RedLock's servers persist nothing (a lock server
// that forgets on restart is the RedLock lesson), while the app's Redis
// keeps an append-only file synced on every write, in a volume, so that
// redis-stream's 202s survive a restart: its replicas run at
// SECKILL_STREAM_DURABILITY=fsync by default, which checks exactly these
// settings at start.
func TestComposeRedisRoles(t *testing.T) {
	p := loadProject(t, nil)
	flags := func(name string, want map[string]string) {
		t.Helper()
		cmd := service(t, p, name).Command
		for flag, v := range want {
			i := slices.Index(cmd, flag)
			if i < 0 || i+1 >= len(cmd) || cmd[i+1] != v {
				t.Errorf("%s: command %q lacks %s %q", name, cmd, flag, v)
			}
		}
	}
	for _, name := range redisServers {
		flags(name, map[string]string{"--save": "", "--appendonly": "no"})
	}
	flags(appRedis, map[string]string{"--appendonly": "yes", "--appendfsync": "always", "--dir": "/data"})
	mounted := false
	for _, v := range service(t, p, appRedis).Volumes {
		mounted = mounted || v.Type == types.VolumeTypeVolume && v.Target == "/data"
	}
	if !mounted {
		t.Errorf("%s: no named volume at /data, where its append-only file is written", appRedis)
	}
	for _, name := range appServices(p) {
		if cfg := appConfig(t, p, name); cfg.StreamDurability != "fsync" {
			t.Errorf("%s: SECKILL_STREAM_DURABILITY = %q, want fsync by default", name, cfg.StreamDurability)
		}
		for _, addr := range appConfig(t, p, name).RedlockAddrs {
			if strings.HasPrefix(addr, appRedis+":") {
				t.Errorf("%s: RedLock uses the app's Redis %s, which persists: its servers must be the independent ones", name, addr)
			}
		}
	}
}

func TestComposePorts(t *testing.T) {
	moved := map[string]string{"SECKILL_PUBLISH_IP": "127.0.0.2"}
	for _, hp := range hostPorts {
		n, err := strconv.Atoi(hp.port)
		if err != nil {
			t.Fatal(err)
		}
		moved[hp.variable] = strconv.Itoa(n + 10000)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		ip   string
		port func(service string) string
	}{
		// A newcomer gets today's ports, on loopback only: a fleet with a
		// known admin API and a sale race is nothing to offer the network.
		{"defaults", nil, "127.0.0.1", func(s string) string { return hostPorts[s].port }},
		// A taken port is moved by a variable rather than by editing the file.
		{"moved", moved, "127.0.0.2", func(s string) string { return moved[hostPorts[s].variable] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := loadProject(t, tc.env)
			published := map[string]string{}
			for _, name := range append(appServices(p), "nginx") {
				for _, port := range service(t, p, name).Ports {
					if other, ok := published[port.Published]; ok {
						t.Errorf("%s and %s both publish host port %s", other, name, port.Published)
					}
					published[port.Published] = name
					if port.HostIP != tc.ip {
						t.Errorf("%s: port %s is published on %q, want %s", name, port.Published, port.HostIP, tc.ip)
					}
				}
			}
			for name := range hostPorts {
				s := service(t, p, name)
				target := uint32(80)
				if name != "nginx" {
					port, err := strconv.ParseUint(addrPort(t, appConfig(t, p, name).Addr), 10, 32)
					if err != nil {
						t.Fatalf("%s: SECKILL_ADDR port: %v", name, err)
					}
					target = uint32(port)
				}
				want := tc.port(name)
				found := false
				for _, port := range s.Ports {
					found = found || (port.Published == want && port.Target == target)
				}
				if !found {
					t.Errorf("%s: no port %s:%d in %+v", name, want, target, s.Ports)
				}
			}
		})
	}
}

// TestComposeAdminTokenWithoutVariables: plain `docker compose up` works
// with no variable set and still no known token. The token service, run
// once before the replicas, writes the file that every replica reads
// through SECKILL_ADMIN_TOKEN_FILE, from the same named volume (read-only
// there); SECKILL_ADMIN_TOKEN, when given, reaches every replica.
func TestComposeAdminTokenWithoutVariables(t *testing.T) {
	p, err := loadProjectErr(map[string]string{})
	if err != nil {
		t.Fatalf("docker-compose.yml with no variable set: %v", err)
	}
	tok := service(t, p, "token")
	if !slices.Equal(tok.Command, types.ShellCommand{"token"}) {
		t.Fatalf("token service runs %v, want [token]", tok.Command)
	}
	file := func(s types.ServiceConfig) (path, volume string, readOnly bool) {
		f := s.Environment["SECKILL_ADMIN_TOKEN_FILE"]
		if f == nil || *f == "" {
			t.Fatalf("%s: no SECKILL_ADMIN_TOKEN_FILE", s.Name)
		}
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeVolume && strings.HasPrefix(*f, strings.TrimRight(v.Target, "/")+"/") {
				return *f, v.Source, v.ReadOnly
			}
		}
		t.Fatalf("%s: SECKILL_ADMIN_TOKEN_FILE=%s is on no named volume", s.Name, *f)
		return "", "", false
	}
	wantPath, wantVol, ro := file(tok)
	if ro {
		t.Error("the token service mounts its volume read-only: it cannot write the token")
	}
	for _, name := range appServices(p) {
		s := service(t, p, name)
		path, vol, ro := file(s)
		if path != wantPath || vol != wantVol || !ro {
			t.Errorf("%s reads the token from %s on volume %s (read-only %v), want %s on %s, read-only", name, path, vol, ro, wantPath, wantVol)
		}
		if d, ok := s.DependsOn["token"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s does not wait for the token service to finish", name)
		}
		if v := s.Environment["SECKILL_ADMIN_TOKEN"]; v != nil && *v != "" {
			t.Errorf("%s has a default admin token %q", name, *v)
		}
	}
	p = loadProject(t, map[string]string{"SECKILL_ADMIN_TOKEN": "a-secret-of-mine"})
	for _, name := range append(appServices(p), "token") {
		if v := service(t, p, name).Environment["SECKILL_ADMIN_TOKEN"]; v == nil || *v != "a-secret-of-mine" {
			t.Errorf("%s: SECKILL_ADMIN_TOKEN does not reach it", name)
		}
	}
}

// TestComposeBuildsImageOnce: one service builds the image and every other
// replica runs that tag, so `up --build` builds it once, not once per
// replica.
func TestComposeBuildsImageOnce(t *testing.T) {
	p := loadProject(t, nil)
	built := builtImages(p)
	if len(built) != 1 || built[0] == "" {
		t.Fatalf("services with a build section have images %q, want exactly one, with an image tag", built)
	}
	for _, name := range replicas {
		s := service(t, p, name)
		if s.Image != built[0] {
			t.Errorf("%s runs image %q, want the built %q", name, s.Image, built[0])
		}
		// Compose pulls a missing image before it builds anything, so a
		// replica that does not build would ask a registry for the local
		// tag (an error on every first start, even though the build then
		// provides it).
		if s.Build == nil && s.PullPolicy != types.PullPolicyNever {
			t.Errorf("%s runs the locally built %q with pull_policy %q, want %q", name, s.Image, s.PullPolicy, types.PullPolicyNever)
		}
	}
	if p := loadProject(t, map[string]string{"SECKILL_IMAGE": "seckill:smoke"}); !slices.Equal(builtImages(p), []string{"seckill:smoke"}) {
		t.Errorf("SECKILL_IMAGE does not name the built image: %q", builtImages(p))
	}
	// The Dockerfile's ARG SECKILL_COMMIT is what `seckill version` shows.
	p = loadProject(t, map[string]string{"SECKILL_COMMIT": "c0ffee5eed42"})
	for _, s := range p.Services {
		if s.Build != nil {
			if got := s.Build.Args["SECKILL_COMMIT"]; got == nil || *got != "c0ffee5eed42" {
				t.Errorf("%s builds without passing SECKILL_COMMIT on (build args %v)", s.Name, s.Build.Args)
			}
		}
	}
}

// TestComposeImagesMatchTestenv: the tests' containers (internal/testenv)
// run the same MySQL and Redis images as the fleet.
func TestComposeImagesMatchTestenv(t *testing.T) {
	p := loadProject(t, nil)
	if got := service(t, p, "mysql").Image; got != testenv.MySQLImage {
		t.Errorf("mysql runs %s, testenv.MySQLImage is %s", got, testenv.MySQLImage)
	}
	for _, name := range redisServers {
		if got := service(t, p, name).Image; got != testenv.RedisImage {
			t.Errorf("%s runs %s, testenv.RedisImage is %s", name, got, testenv.RedisImage)
		}
	}
}

func TestComposeHealthchecks(t *testing.T) {
	p := loadProject(t, nil)
	for _, name := range append(appServices(p), allServices...) {
		hc := service(t, p, name).HealthCheck
		if hc == nil || hc.Disable || len(hc.Test) == 0 || hc.Test[0] == "NONE" {
			t.Errorf("%s: no healthcheck, so depends_on cannot wait for it", name)
		}
	}
	// The MySQL image's init-time server listens on the socket only, so a
	// ping over the socket can pass before the real server is up.
	if hc := service(t, p, "mysql").HealthCheck; hc == nil || !slices.Contains(hc.Test, "127.0.0.1") {
		t.Error("mysql: the healthcheck should ping over TCP (-h 127.0.0.1)")
	}
	for _, name := range appServices(p) {
		url := fmt.Sprintf("http://127.0.0.1:%s/readyz", addrPort(t, appConfig(t, p, name).Addr))
		want := types.HealthCheckTest{"CMD", "/seckill", "probe", url}
		if got := service(t, p, name).HealthCheck; got == nil || !slices.Equal(got.Test, want) {
			t.Errorf("%s: healthcheck should be %q (the image has no shell)", name, want)
		}
	}
}

func TestComposeDependsOnHealthy(t *testing.T) {
	p := loadProject(t, nil)
	for _, s := range p.Services {
		for dep, d := range s.DependsOn {
			if dep == "token" { // a one-shot service: it finishes, it is never healthy
				continue
			}
			if d.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s depends on %s with condition %q, want %s", s.Name, dep, d.Condition, types.ServiceConditionHealthy)
			}
		}
	}
	want := map[string][]string{"nginx": appServices(p)}
	for _, name := range appServices(p) {
		want[name] = append([]string{"mysql"}, redisServers...)
	}
	for name, deps := range want {
		s := service(t, p, name)
		for _, dep := range deps {
			if _, ok := s.DependsOn[dep]; !ok {
				t.Errorf("%s does not wait for %s", name, dep)
			}
		}
	}
}

// bindSource returns the host path mounted at target in s.
func bindSource(t *testing.T, s types.ServiceConfig, target string) (types.ServiceVolumeConfig, bool) {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Target == target {
			if v.Type != types.VolumeTypeBind {
				t.Errorf("%s: %s is a %s mount, want a bind mount of a repo folder", s.Name, target, v.Type)
			}
			return v, true
		}
	}
	return types.ServiceVolumeConfig{}, false
}

func TestComposeMySQLSchemaMount(t *testing.T) {
	p := loadProject(t, nil)
	v, ok := bindSource(t, service(t, p, "mysql"), "/docker-entrypoint-initdb.d")
	if !ok {
		t.Fatal("mysql: nothing mounted at /docker-entrypoint-initdb.d, so the schema is not applied")
	}
	if !v.ReadOnly {
		t.Error("mysql: the schema mount should be read-only")
	}
	want, err := filepath.Abs(filepath.Join("..", "sql", "mysql"))
	if err != nil {
		t.Fatal(err)
	}
	if v.Source != want {
		t.Errorf("mysql: schema mount source = %s, want %s", v.Source, want)
	}
	files, err := filepath.Glob(filepath.Join(v.Source, "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("mysql: no .sql files in %s (err %v)", v.Source, err)
	}
	for _, name := range []string{"001_schema.sql", "002_seed.sql"} {
		if !slices.Contains(files, filepath.Join(v.Source, name)) {
			t.Errorf("mysql: %s is missing from %s", name, v.Source)
		}
	}
}

var (
	upstreamBlock = regexp.MustCompile(`(?s)upstream\s+(\S+)\s*\{(.*?)\}`)
	upstreamLine  = regexp.MustCompile(`(?m)^\s*server\s+([^\s;]+)`)
	comment       = regexp.MustCompile(`(?m)#.*$`)
)

func TestComposeNginxConfig(t *testing.T) {
	p := loadProject(t, nil)
	v, ok := bindSource(t, service(t, p, "nginx"), "/etc/nginx/conf.d/default.conf")
	if !ok {
		t.Fatal("nginx: nothing mounted at /etc/nginx/conf.d/default.conf")
	}
	raw, err := os.ReadFile(v.Source)
	if err != nil {
		t.Fatalf("nginx: mounted config: %v", err)
	}
	conf := comment.ReplaceAllString(string(raw), "")

	m := upstreamBlock.FindStringSubmatch(conf)
	if m == nil {
		t.Fatalf("nginx: %s has no upstream block", v.Source)
	}
	var servers, want []string
	for _, s := range upstreamLine.FindAllStringSubmatch(m[2], -1) {
		servers = append(servers, s[1])
	}
	for _, name := range appServices(p) {
		want = append(want, name+":"+addrPort(t, appConfig(t, p, name).Addr))
	}
	slices.Sort(want)
	if slices.Sort(servers); !slices.Equal(servers, want) {
		t.Errorf("nginx: upstream %s lists %v, want every replica: %v", m[1], servers, want)
	}

	for _, loc := range []string{"/", "/api/"} {
		re := regexp.MustCompile(`(?s)location\s+` + regexp.QuoteMeta(loc) + `\s*\{[^}]*proxy_pass\s+http://` + regexp.QuoteMeta(m[1]) + `\s*;`)
		if !re.MatchString(conf) {
			t.Errorf("nginx: location %s does not proxy_pass to upstream %s", loc, m[1])
		}
	}
	if !regexp.MustCompile(`(?m)^\s*listen\s+80\s*;`).MatchString(conf) {
		t.Error("nginx: does not listen on 80, the port 8080 is published to")
	}
	// Retrying a POST on another replica after it reached the first could
	// buy twice; nginx only does that when told "non_idempotent".
	if strings.Contains(conf, "non_idempotent") {
		t.Error("nginx: proxy_next_upstream non_idempotent would retry POSTs (buys) on another replica")
	}
	if !regexp.MustCompile(`proxy_next_upstream\s[^;]*http_50[234]`).MatchString(conf) {
		t.Error("nginx: proxy_next_upstream should move idempotent requests on after a 502/503/504")
	}
}

// TestComposeNginxAnswersProblems: the answers nginx gives itself (413,
// 502, 503, 504) are problem+json, as every seckill answer is. Each has an
// error_page to a file of deploy/problems/ that compose mounts where the
// config looks for it, served as application/problem+json with
// Retry-After; each file is a problem of its status whose type the
// replicas document (GET /problems/{slug}) under the same title and
// status.
func TestComposeNginxAnswersProblems(t *testing.T) {
	p := loadProject(t, nil)
	nginx := service(t, p, "nginx")
	v, ok := bindSource(t, nginx, "/etc/nginx/conf.d/default.conf")
	if !ok {
		t.Fatal("nginx: nothing mounted at /etc/nginx/conf.d/default.conf")
	}
	raw, err := os.ReadFile(v.Source)
	if err != nil {
		t.Fatal(err)
	}
	conf := comment.ReplaceAllString(string(raw), "")
	loc := regexp.MustCompile(`(?s)location\s+\^~\s+/_problems/\s*\{\s*internal;\s*alias\s+([^;\s]+);(.*?)\n\s*\}\n`).FindStringSubmatch(conf)
	if loc == nil {
		t.Fatal("nginx: no internal location ^~ /_problems/ with an alias")
	}
	for _, want := range []string{`types\s*\{\s*\}`, `default_type\s+application/problem\+json;`, `add_header\s+Retry-After\s+"?\d+"?\s+always;`} {
		if !regexp.MustCompile(want).MatchString(loc[2]) {
			t.Errorf("nginx: the /_problems/ location lacks %s", want)
		}
	}
	dir, ok := bindSource(t, nginx, strings.TrimSuffix(loc[1], "/"))
	if !ok {
		t.Fatalf("nginx: nothing mounted at %s, where the problems are served from", loc[1])
	}
	for _, status := range []int{413, 502, 503, 504} {
		if !regexp.MustCompile(fmt.Sprintf(`error_page\s+%d\s+/_problems/%d\.json;`, status, status)).MatchString(conf) {
			t.Errorf("nginx: no error_page %d /_problems/%d.json", status, status)
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir.Source, fmt.Sprintf("%d.json", status)))
		if err != nil {
			t.Errorf("nginx's %d: %v", status, err)
			continue
		}
		var got api.Problem
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil || got.Status != status || got.Detail == "" {
			t.Errorf("nginx's %d: %s is not a problem of status %d with a detail (%v)", status, b, status, err)
			continue
		}
		doc, ok := httpapi.ProblemDoc(strings.TrimPrefix(got.Type, api.ProblemTypePrefix))
		if !ok || doc.Status != status || doc.Title != got.Title {
			t.Errorf("nginx's %d says type %q, title %q; the replicas document %+v (found: %v)", status, got.Type, got.Title, doc, ok)
		}
	}
}

// TestComposeHAOverride: docker-compose.ha.yml over docker-compose.yml
// gives the app's Redis a replica and three Sentinels, and every app
// replica loads a configuration that asks the Sentinels for the primary
// they monitor (by the same master name), not a fixed address, and runs
// redis-stream at durability replica. Both Redis servers keep an
// append-only file as well; RedLock's servers are untouched.
func TestComposeHAOverride(t *testing.T) {
	p, err := loadProjectErr(map[string]string{"SECKILL_ADMIN_TOKEN": testToken}, "docker-compose.yml", "docker-compose.ha.yml")
	if err != nil {
		t.Fatalf("docker-compose.yml with docker-compose.ha.yml does not load: %v", err)
	}
	sentinels := []string{"sentinel-1", "sentinel-2", "sentinel-3"}
	for _, name := range append([]string{appRedis, "redis-replica"}, sentinels...) {
		service(t, p, name)
	}
	for _, name := range []string{appRedis, "redis-replica"} {
		cmd := service(t, p, name).Command
		for flag, v := range map[string]string{"--appendonly": "yes", "--appendfsync": "always"} {
			if i := slices.Index(cmd, flag); i < 0 || i+1 >= len(cmd) || cmd[i+1] != v {
				t.Errorf("%s: command %q lacks %s %s", name, cmd, flag, v)
			}
		}
	}
	for _, name := range []string{appRedis, "redis-replica"} {
		// Run through a script, past the image's entrypoint, which turns
		// protected mode off only for a bare redis-server.
		if cmd := strings.Join(service(t, p, name).Command, " "); !strings.Contains(cmd, "--protected-mode no") {
			t.Errorf("%s: command %q lacks --protected-mode no: the replica and the Sentinels are refused", name, cmd)
		}
	}
	replicaCmd := strings.Join(service(t, p, "redis-replica").Command, " ")
	if !strings.Contains(replicaCmd, "--replicaof "+appRedis+" 6379") {
		t.Errorf("redis-replica: command %q does not copy %s", replicaCmd, appRedis)
	}
	for _, name := range redisServers {
		if cmd := service(t, p, name).Command; !slices.Contains(cmd, "no") {
			t.Errorf("%s: command %q: RedLock's servers must still persist nothing", name, cmd)
		}
	}
	monitor := regexp.MustCompile(`sentinel monitor (\S+) (\S+) (\d+) (\d+)`)
	for _, name := range appServices(p) {
		cfg := appConfig(t, p, name)
		if len(cfg.RedisAddrs) != 0 {
			t.Errorf("%s: SECKILL_REDIS_ADDR = %v with Sentinels", name, cfg.RedisAddrs)
		}
		var hosts []string
		for _, a := range cfg.RedisSentinels {
			host, port, err := net.SplitHostPort(a)
			if err != nil || port != "26379" {
				t.Errorf("%s: Sentinel address %q", name, a)
			}
			hosts = append(hosts, host)
		}
		if slices.Sort(hosts); !slices.Equal(hosts, sentinels) {
			t.Errorf("%s: SECKILL_REDIS_SENTINELS hosts %v, want %v", name, hosts, sentinels)
		}
		for _, s := range sentinels {
			m := monitor.FindStringSubmatch(strings.Join(service(t, p, s).Command, " "))
			if m == nil || m[1] != cfg.RedisMaster || m[2] != appRedis || m[3] != "6379" || m[4] != "2" {
				t.Errorf("%s: monitors %v, want master %q at %s:6379 with a quorum of 2", s, m, cfg.RedisMaster, appRedis)
			}
		}
		if cfg.StreamDurability != "replica" {
			t.Errorf("%s: SECKILL_STREAM_DURABILITY = %q, want replica: fsync does not keep an order through a failover", name, cfg.StreamDurability)
		}
	}
}

// TestComposeClusterOverride: docker-compose.cluster.yml loads over the
// base file; six Cluster nodes, each announcing its own hostname and
// keeping an append-only file; a one-shot service that makes the Cluster
// with a replica per master; and the app's replicas, which wait for it,
// listing the six nodes (so they are Cluster clients) under redis-sharded
// with four buckets and key records confirmed on a replica. RedLock's
// servers still persist nothing.
func TestComposeClusterOverride(t *testing.T) {
	p, err := loadProjectErr(map[string]string{"SECKILL_ADMIN_TOKEN": testToken}, "docker-compose.yml", "docker-compose.cluster.yml")
	if err != nil {
		t.Fatalf("docker-compose.yml with docker-compose.cluster.yml does not load: %v", err)
	}
	var nodes []string
	for i := 1; i <= 6; i++ {
		name := fmt.Sprintf("redis-node-%d", i)
		nodes = append(nodes, name+":6379")
		s := service(t, p, name)
		cmd := strings.Join(s.Command, " ")
		for _, want := range []string{"--cluster-enabled yes", `--cluster-announce-hostname "$(hostname)"`, "--cluster-preferred-endpoint-type hostname", "--appendonly yes", "--protected-mode no"} {
			if !strings.Contains(cmd, want) {
				t.Errorf("%s: command %q lacks %s", name, cmd, want)
			}
		}
		if s.Hostname != name {
			t.Errorf("%s: hostname %q, want its name (it announces it)", name, s.Hostname)
		}
	}
	initCmd := strings.Join(service(t, p, "redis-cluster-init").Command, " ")
	if !strings.Contains(initCmd, "--cluster create") || !strings.Contains(initCmd, "--cluster-replicas 1") {
		t.Errorf("redis-cluster-init: command %q does not make a Cluster with a replica per master", initCmd)
	}
	for _, name := range redisServers {
		if cmd := service(t, p, name).Command; !slices.Contains(cmd, "no") {
			t.Errorf("%s: command %q: RedLock's servers must still persist nothing", name, cmd)
		}
	}
	for _, name := range appServices(p) {
		cfg := appConfig(t, p, name)
		if !slices.Equal(cfg.RedisAddrs, nodes) {
			t.Errorf("%s: SECKILL_REDIS_ADDR = %v, want the six nodes %v", name, cfg.RedisAddrs, nodes)
		}
		if cfg.IdempotencyReplicas != 1 {
			t.Errorf("%s: SECKILL_IDEMPOTENCY_REPLICAS = %d, want 1: a key record lost with its master lets a retry run afresh", name, cfg.IdempotencyReplicas)
		}
		if cfg.Stage != "redis-sharded" || cfg.StockBuckets != 4 {
			t.Errorf("%s: stage %q with %d buckets, want redis-sharded with 4 (product 1's tags then fall on all three masters)", name, cfg.Stage, cfg.StockBuckets)
		}
		if d, ok := service(t, p, name).DependsOn["redis-cluster-init"]; !ok || d.Condition != "service_completed_successfully" {
			t.Errorf("%s: does not wait for the Cluster to be made (%+v)", name, d)
		}
	}
}
