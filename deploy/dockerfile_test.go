package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
	line int
}

// stage is the instructions from one FROM to the next.
type stage struct {
	from  string // image of the FROM line
	name  string // the AS name, if any
	instr []instruction
}

// parseDockerfile reads just enough of the Dockerfile syntax for the checks
// below: comments, backslash continuations, and stages. It is not BuildKit's
// parser and does not need to be: the file is ours and keeps to plain forms.
func parseDockerfile(t *testing.T, text string) []stage {
	t.Helper()
	var stages []stage
	var cur strings.Builder
	start := 0
	flush := func() {
		s := strings.TrimSpace(cur.String())
		cur.Reset()
		if s == "" {
			return
		}
		cmd, args, _ := strings.Cut(s, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			st := stage{}
			for i := 0; i < len(f); i++ {
				switch {
				case strings.HasPrefix(f[i], "--"):
				case strings.EqualFold(f[i], "AS") && i+1 < len(f):
					st.name = f[i+1]
					i++
				case st.from == "":
					st.from = f[i]
				}
			}
			stages = append(stages, st)
			return
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile line %d: %s before the first FROM", in.line, in.cmd)
		}
		last := &stages[len(stages)-1]
		last.instr = append(last.instr, in)
	}
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue // a comment, also inside a continued instruction
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return stages
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.instr {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// last returns the stage's last cmd instruction, the one that takes effect.
func (s stage) last(cmd string) (instruction, bool) {
	all := s.all(cmd)
	if len(all) == 0 {
		return instruction{}, false
	}
	return all[len(all)-1], true
}

// execForm decodes a JSON-array instruction such as ENTRYPOINT ["/seckill"].
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var argv []string
	if err := json.Unmarshal([]byte(in.args), &argv); err != nil {
		t.Errorf("Dockerfile line %d: %s %s is not in exec (JSON array) form: %v", in.line, in.cmd, in.args, err)
	}
	return argv
}

func loadDockerfile(t *testing.T) []stage {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages := parseDockerfile(t, string(raw))
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stage(s), want a build stage and a small final stage", len(stages))
	}
	return stages
}

func TestDockerfileBuildStage(t *testing.T) {
	stages := loadDockerfile(t)
	build := stages[0]
	if !strings.HasPrefix(build.from, "golang:") {
		t.Errorf("first stage is FROM %s, want a golang image", build.from)
	}

	cgoOff := regexp.MustCompile(`(^|\s)CGO_ENABLED=0(\s|$)`)
	off := false
	for _, in := range slices.Concat(build.all("ENV"), build.all("RUN")) {
		off = off || cgoOff.MatchString(in.args)
	}
	if !off {
		t.Error("build stage never sets CGO_ENABLED=0, so the binary may need libc the final image lacks")
	}

	var goBuild instruction
	for _, in := range build.all("RUN") {
		if strings.Contains(in.args, "go build") {
			goBuild = in
		}
	}
	for _, flag := range []string{"-trimpath", "-s -w", "./cmd/seckill", "-X main.commit=${SECKILL_COMMIT}"} {
		if !strings.Contains(goBuild.args, flag) {
			t.Errorf("go build step %q lacks %s", goBuild.args, flag)
		}
	}
	// The context has no .git: the commit `seckill version` prints must
	// arrive as a build argument, declared before the build uses it.
	arg := false
	for _, in := range build.instr {
		arg = arg || (in.cmd == "ARG" && strings.HasPrefix(in.args, "SECKILL_COMMIT") && in.line < goBuild.line)
	}
	if !arg {
		t.Error("build stage has no ARG SECKILL_COMMIT before the go build, so images report commit unknown")
	}

	// The module download must be its own layer, before the sources are
	// copied, or every source edit downloads the modules again.
	download, copyAll := -1, -1
	for i, in := range build.instr {
		switch {
		case in.cmd == "RUN" && strings.Contains(in.args, "go mod download") && download < 0:
			download = i
		case in.cmd == "COPY" && regexp.MustCompile(`^\.\s+\.$`).MatchString(in.args) && copyAll < 0:
			copyAll = i
		}
	}
	if download < 0 || copyAll < 0 || download > copyAll {
		t.Error("build stage should COPY go.mod go.sum, RUN go mod download, and only then COPY . .")
	}
}

// TestDockerfileNeedsNoFrontendImage: a "# syntax=" parser directive makes
// BuildKit pull its frontend image before it builds anything, so the image
// could not be built where only the base images are at hand (an offline
// workshop, a registry mirror without it).
func TestDockerfileNeedsNoFrontendImage(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// Parser directives are comments of the form "# key=value" before the
	// first instruction or blank line.
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "#") {
			break
		}
		if regexp.MustCompile(`(?i)^#\s*syntax\s*=`).MatchString(line) {
			t.Errorf("Dockerfile starts with %q, which needs a registry to build", line)
		}
	}
}

func TestDockerfileFinalStage(t *testing.T) {
	stages := loadDockerfile(t)
	final := stages[len(stages)-1]
	if !strings.HasPrefix(final.from, "gcr.io/distroless/static") && final.from != "scratch" {
		t.Errorf("final stage is FROM %s, want distroless static or scratch", final.from)
	}

	user, ok := final.last("USER")
	if !ok {
		t.Fatal("final stage has no USER, so the app runs as root")
	}
	uid, _, _ := strings.Cut(user.args, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %s: want a numeric non-root UID, which runtimes can check without /etc/passwd", user.args)
	}

	if ep, ok := final.last("ENTRYPOINT"); !ok || !slices.Equal(execForm(t, ep), []string{"/seckill"}) {
		t.Errorf(`final stage should have ENTRYPOINT ["/seckill"] (healthchecks run /seckill probe)`)
	}
	if cmd, ok := final.last("CMD"); !ok || !slices.Equal(execForm(t, cmd), []string{"serve"}) {
		t.Errorf(`final stage should have CMD ["serve"]`)
	}

	copied := false
	for _, in := range final.all("COPY") {
		copied = copied || regexp.MustCompile(`--from=\S+\s+\S+\s+/seckill$`).MatchString(in.args)
	}
	if !copied {
		t.Error("final stage does not COPY the binary from the build stage to /seckill")
	}

	// EXPOSE documents the port the replicas listen on (SECKILL_ADDR).
	p := loadProject(t, nil)
	want := addrPort(t, appConfig(t, p, replicas[0]).Addr)
	exposed := false
	for _, in := range final.all("EXPOSE") {
		exposed = exposed || slices.Contains(strings.Fields(in.args), want) || slices.Contains(strings.Fields(in.args), want+"/tcp")
	}
	if !exposed {
		t.Errorf("final stage does not EXPOSE %s, the port SECKILL_ADDR sets in docker-compose.yml", want)
	}
}

func TestDockerignore(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, filepath.Clean(strings.TrimPrefix(line, "/")))
		}
	}
	for _, want := range []string{".git", ".env", "bin", ".demo", "loadtest/reports", "web/node_modules"} {
		if !slices.Contains(patterns, want) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
}
