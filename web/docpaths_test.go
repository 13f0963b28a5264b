package web_test

import (
	"fmt"
	"html"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The pages name the repository's files in passing as well as in links:
// `internal/inventory/crowd.go` in backticks, <code>internal/lock/redlock.go</code>
// on a workshop page, "(internal/pitfalls/failover_test.go)" beside a test,
// loadtest/wrk/fleet.sh in a fenced command, or a bare `stage_unlocked.go`
// in a table under a paragraph that places the stages in
// `internal/inventory/`. A file moved or renamed leaves such names behind,
// and TestDocLinksResolve sees only links.
// TestDocsNameFilesThatExist reads every page and checks every such name.

// namedFile matches a token that names a file the pages point readers at:
// source, scripts, schema, compose files and pages.
var namedFile = regexp.MustCompile(`^[\w.*/-]*[\w*]\.(go|lua|sql|ya?ml|sh|md)$`)

// bareNamedFile matches a file name without a directory that a page may
// name in code. Pages name the reports the lab writes (report.md) the same
// way, so a bare .md is not taken for a file of the repository.
var bareNamedFile = regexp.MustCompile(`^[\w.-]+\.(go|lua|sql|ya?ml|sh)$`)

// mention is one file name a page writes: the token as written, whether
// it was in a code span, and the directories (slash-separated, from the
// repository root) that its sentence names in code.
type mention struct {
	name string
	code bool
	dirs []string
}

// segment is a run of a block's text, in code or not.
type segment struct {
	text string
	code bool
}

// pageBlock is a paragraph, list, heading or table row of a page.
type pageBlock struct {
	segs     []segment
	tableRow bool
}

// splitCode cuts a markdown block into segments at its code spans.
func splitCode(b string) []segment {
	var segs []segment
	last := 0
	for _, m := range mdCode.FindAllStringIndex(b, -1) {
		segs = append(segs, segment{b[last:m[0]], false}, segment{b[m[0]+1 : m[1]-1], true})
		last = m[1]
	}
	return append(segs, segment{b[last:], false})
}

// tree is what the checks know of the repository: its root, its top
// directories (a path in prose counts only when it starts with one), the
// base names of its files, and the pages to check, slash-separated from
// the root: every markdown file but CHANGELOG.md (history: it names files
// as they were), and the HTML pages under web/static/, the workshop's
// included.
type tree struct {
	root  string
	tops  []string
	bases map[string]bool
	pages []string
}

// skipDir reports whether a walk of the repository leaves out a directory:
// version control, node modules wherever npm put them (CI installs the
// OpenAPI linter's under internal/api/lint) and the outputs make writes.
func skipDir(rel string) bool {
	return path.Base(rel) == "node_modules" ||
		slices.Contains([]string{".git", "test-artifacts", "bin", "loadtest/reports"}, rel)
}

// readTree reads the repository at root.
func readTree(root string) (tree, error) {
	tr := tree{root: root, bases: map[string]bool{}}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if skipDir(rel) {
				return filepath.SkipDir
			}
			if rel != "." && !strings.Contains(rel, "/") && !strings.HasPrefix(rel, ".") {
				tr.tops = append(tr.tops, rel)
			}
			return nil
		}
		tr.bases[d.Name()] = true
		if rel != "CHANGELOG.md" && strings.HasSuffix(rel, ".md") ||
			strings.HasPrefix(rel, "web/static/") && strings.HasSuffix(rel, ".html") {
			tr.pages = append(tr.pages, rel)
		}
		return nil
	})
	return tr, err
}

var (
	// htmlBlockTag matches a tag that starts or ends a block of an HTML page.
	htmlBlockTag = regexp.MustCompile(`(?i)</?(?:p|li|ul|ol|td|th|tr|table|dd|dt|dl|h[1-6]|pre|div|section|header|footer|nav|main|article|figure|figcaption|blockquote|body|head|html|title|br)\b[^>]*>`)
	// htmlCode matches a code element and its content.
	htmlCode = regexp.MustCompile(`(?is)<code\b[^>]*>(.*?)</code>`)
	// htmlScript matches what an HTML page holds that is no text.
	htmlScript = regexp.MustCompile(`(?is)<(script|style)\b[^>]*>.*?</(?:script|style)>|<!--.*?-->`)
	// blankLine separates two blocks of markdown.
	blankLine = regexp.MustCompile(`\n[ \t]*\n`)
	// sentenceEnd ends a sentence (or a clause that may name its own
	// directory) in English or Chinese.
	sentenceEnd = regexp.MustCompile(`[.;:!?]\s+|[。；：！？]`)
	// placeholder stands for the nth code span while a block is split into
	// sentences, so that no punctuation in code splits it.
	placeholder = regexp.MustCompile("\x00([0-9]+)\x00")
)

// markdownBlocks splits a markdown page into blocks. Fenced code reads as
// prose: its commands name paths from the root (loadtest/wrk/fleet.sh),
// and its backticks are the shell's, not code spans. A link keeps only its
// text, since TestDocLinksResolve checks its target, and each row of a
// table is a block of its own.
func markdownBlocks(md string) []pageBlock {
	md = mdFence.ReplaceAllStringFunc(md, func(fence string) string {
		return "\n\n" + strings.ReplaceAll(fence, "`", " ") + "\n\n"
	})
	md = mdInlineLink.ReplaceAllString(md, "$1")
	var blocks []pageBlock
	for _, b := range blankLine.Split(md, -1) {
		if !strings.HasPrefix(strings.TrimSpace(b), "|") {
			blocks = append(blocks, pageBlock{segs: splitCode(b)})
			continue
		}
		for _, row := range strings.Split(b, "\n") {
			blocks = append(blocks, pageBlock{segs: splitCode(row), tableRow: true})
		}
	}
	return blocks
}

// htmlBlocks splits an HTML page into blocks of segments, its tags
// dropped and its entities decoded.
func htmlBlocks(page string) []pageBlock {
	page = htmlScript.ReplaceAllString(page, "")
	words := func(s string) string { return html.UnescapeString(tag.ReplaceAllString(s, " ")) }
	var blocks []pageBlock
	for _, b := range htmlBlockTag.Split(page, -1) {
		var segs []segment
		last := 0
		for _, m := range htmlCode.FindAllStringSubmatchIndex(b, -1) {
			segs = append(segs, segment{words(b[last:m[0]]), false}, segment{words(b[m[2]:m[3]]), true})
			last = m[1]
		}
		blocks = append(blocks, pageBlock{segs: append(segs, segment{words(b[last:]), false})})
	}
	return blocks
}

// sentences splits a block into its sentences, each a list of segments;
// a sentence boundary inside code does not count.
func sentences(segs []segment) [][]segment {
	var b strings.Builder
	for i, s := range segs {
		if s.code {
			fmt.Fprintf(&b, "\x00%d\x00", i)
		} else {
			b.WriteString(s.text)
		}
	}
	var out [][]segment
	for _, sent := range sentenceEnd.Split(b.String(), -1) {
		var parts []segment
		last := 0
		for _, m := range placeholder.FindAllStringSubmatchIndex(sent, -1) {
			i, err := strconv.Atoi(sent[m[2]:m[3]])
			if err != nil || i >= len(segs) {
				panic(fmt.Sprintf("placeholder %q names no code span", sent[m[0]:m[1]]))
			}
			parts = append(parts, segment{sent[last:m[0]], false}, segs[i])
			last = m[1]
		}
		out = append(out, append(parts, segment{sent[last:], false}))
	}
	return out
}

// cleanToken drops from a token what surrounds a file name in text: the
// punctuation around it, a line number (crowd.go:310), an anchor and a
// leading ./ (go test ./internal/lock/).
func cleanToken(tok string) string {
	tok = strings.Trim(tok, "\"'`.,;:!?()[]{}<>，。；：！？（）、「」“”‘’")
	if i := strings.IndexAny(tok, ":#"); i >= 0 {
		tok = tok[:i]
	}
	return strings.TrimPrefix(tok, "./")
}

// tokens lists the cleaned whitespace-separated tokens of a text, leaving
// out those that cannot be a path of the repository: URLs, absolute
// paths, placeholders and variables.
func tokens(text string) []string {
	var out []string
	for _, f := range strings.Fields(text) {
		if strings.Contains(f, "://") || strings.ContainsAny(f, "<>{}$=@") {
			continue
		}
		if t := cleanToken(f); t != "" && !strings.HasPrefix(t, "/") {
			out = append(out, t)
		}
	}
	return out
}

// namedDirs lists the directories of the repository a sentence names in
// code: `internal/inventory/`, `internal/lock`.
func (tr tree) namedDirs(sent []segment) []string {
	var dirs []string
	for _, s := range sent {
		if !s.code {
			continue
		}
		for _, t := range tokens(s.text) {
			d := strings.TrimSuffix(t, "/")
			if !strings.Contains(t, "/") || strings.HasPrefix(d, "..") || slices.Contains(dirs, d) {
				continue
			}
			if info, err := os.Stat(filepath.Join(tr.root, filepath.FromSlash(d))); err == nil && info.IsDir() {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// mentions lists the file names a page writes. In code, every token that
// looks like a file counts; in prose, only a path that starts with a top
// directory of the repository ("internal/pitfalls/failover_test.go"), so
// that words like "redis.conf" or "e.g." cannot trip the check. Each
// mention carries the directories its sentence names; a table's rows
// that name none take those of the paragraph that introduces the table.
func (tr tree) mentions(page, src string) []mention {
	blocks := markdownBlocks(src)
	if strings.HasSuffix(page, ".html") {
		blocks = htmlBlocks(src)
	}
	var out []mention
	var introDirs []string
	for _, b := range blocks {
		for _, sent := range sentences(b.segs) {
			dirs := tr.namedDirs(sent)
			if len(dirs) == 0 && b.tableRow {
				dirs = introDirs
			}
			for _, s := range sent {
				for _, t := range tokens(s.text) {
					if !namedFile.MatchString(t) {
						continue
					}
					top, _, nested := strings.Cut(t, "/")
					if s.code || nested && slices.Contains(tr.tops, top) {
						out = append(out, mention{name: t, code: s.code, dirs: dirs})
					}
				}
			}
		}
		if !b.tableRow {
			introDirs = nil
			for _, sent := range sentences(b.segs) {
				introDirs = append(introDirs, tr.namedDirs(sent)...)
			}
		}
	}
	return out
}

// pathRules are the rules a mention must keep, each returning a problem
// or "" (and ok false when it does not apply).
var pathRules = []func(tr tree, page string, m mention) (problem string, ok bool){
	checkRepoPath,
	checkBareName,
}

// checkRepoPath: a name with a directory is a path from the repository
// root (a page's own directory is tried too, and a ../ path is read from
// it); a pattern (sql/*/007_sale_mark.sql) must match a file.
func checkRepoPath(tr tree, page string, m mention) (string, bool) {
	if !strings.Contains(m.name, "/") {
		return "", false
	}
	candidates := []string{path.Clean(m.name), path.Clean(path.Join(path.Dir(page), m.name))}
	if strings.HasPrefix(m.name, "../") {
		candidates = candidates[1:]
	}
	for _, c := range candidates {
		if c == ".." || strings.HasPrefix(c, "../") {
			continue
		}
		matches, err := filepath.Glob(filepath.Join(tr.root, filepath.FromSlash(c)))
		if err == nil && len(matches) > 0 {
			return "", true
		}
	}
	if strings.Contains(m.name, "*") {
		return fmt.Sprintf("%s: %s matches no file of the repository", page, m.name), true
	}
	return fmt.Sprintf("%s: %s: no such file in the repository", page, m.name), true
}

// checkBareName: a file name without a directory, in code, is in one of
// the directories its sentence (or its table's paragraph) names, or when
// it names none, somewhere in the repository.
func checkBareName(tr tree, page string, m mention) (string, bool) {
	if strings.Contains(m.name, "/") || !m.code || !bareNamedFile.MatchString(m.name) {
		return "", false
	}
	if len(m.dirs) == 0 {
		if tr.bases[m.name] {
			return "", true
		}
		return fmt.Sprintf("%s: %s: no file of that name in the repository", page, m.name), true
	}
	for _, d := range m.dirs {
		if _, err := os.Stat(filepath.Join(tr.root, filepath.FromSlash(d), m.name)); err == nil {
			return "", true
		}
	}
	return fmt.Sprintf("%s: %s: not in %s, where the page places it", page, m.name, strings.Join(m.dirs, " or ")), true
}

// checkPaths returns one line per file name that a page under root names
// and the repository does not hold.
func checkPaths(root string) ([]string, error) {
	tr, err := readTree(root)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, page := range tr.pages {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
		if err != nil {
			return nil, err
		}
		for _, m := range tr.mentions(page, string(src)) {
			for _, rule := range pathRules {
				if p, ok := rule(tr, page, m); ok {
					if p != "" && !slices.Contains(problems, p) {
						problems = append(problems, p)
					}
					break
				}
			}
		}
	}
	return problems, nil
}

// TestDocsNameFilesThatExist: every file a page names, in the READMEs,
// docs/, the facilitator's kit and the workshop pages, exists where the
// page says. When a file moves, the pages that name it must follow.
func TestDocsNameFilesThatExist(t *testing.T) {
	problems, err := checkPaths("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestDocPathChecksCatchMissingFiles runs the check on a small tree whose
// pages name files in each way, present and missing, so that a check that
// passes everything cannot go unnoticed.
func TestDocPathChecksCatchMissingFiles(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"internal/shop/buy.go":      "package shop\n",
		"internal/shop/stage_a.go":  "package shop\n",
		"internal/other/sell.go":    "package other\n",
		"sql/mysql/001_schema.sql":  "",
		"tools/run.sh":              "",
		"CHANGELOG.md":              "`internal/shop/gone.go` was removed\n",
		"node_modules/x/missing.md": "`internal/shop/gone.go`\n",
		// npm's tree below a tool's folder, as .ci/run installs the linter's.
		"tools/lint/node_modules/y/README.md": "`internal/shop/gone.go`\n",
		"docs/guide.md": "# Guide\n\n" +
			"See `internal/shop/buy.go:12` and `internal/shop/moved.go`, `sql/*/001_schema.sql` and `sql/*/002_gone.sql`.\n" +
			"Run `go test ./internal/shop/` or `./tools/run.sh`; the lab writes `report.md`.\n\n" +
			"The buy lives in `buy.go` in `internal/shop/`. The sell is `sell.go` in `internal/shop/`.\n" +
			"Elsewhere, `sell.go` and `nowhere.go`; [`buy.go`](../internal/shop/buy.go).\n\n" +
			"The stages are files in `internal/shop/`:\n\n" +
			"| stage | file |\n|---|---|\n| a | `stage_a.go` |\n| b | `stage_b.go` |\n| c | `sell.go` in `internal/other` |\n\n" +
			"In prose internal/shop/prose_gone.go and https://example.com/internal/shop/x.go, /tmp/y.go and shop/not_from_the_root.go.\n\n" +
			"```sh\ncat internal/shop/fenced_gone.go `nowhere_either.go` tools/run.sh\n```\n",
		"web/static/workshop/page.html": "<html><body><main>\n" +
			"<p lang=\"en\">Read <code>internal/shop/buy.go</code> and <code>internal/shop/gone.go</code>.</p>\n" +
			"<p class=\"file\"><code>TestX</code> <span class=\"muted\">(internal/shop/test_gone_test.go)</span></p>\n" +
			"<p lang=\"zh-Hans\">见 <code>internal/shop</code> 中的 <code>stage_a.go</code>；<code>stage_z.go</code> 也在 <code>internal/shop</code> 里。</p>\n" +
			"<script>var p = \"internal/shop/script_gone.go\";</script>\n" +
			"</main></body></html>\n",
	}
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := checkPaths(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"docs/guide.md: internal/shop/moved.go: no such file in the repository",
		"docs/guide.md: sql/*/002_gone.sql matches no file of the repository",
		"docs/guide.md: sell.go: not in internal/shop, where the page places it",
		"docs/guide.md: nowhere.go: no file of that name in the repository",
		"docs/guide.md: stage_b.go: not in internal/shop, where the page places it",
		"docs/guide.md: internal/shop/prose_gone.go: no such file in the repository",
		"docs/guide.md: internal/shop/fenced_gone.go: no such file in the repository",
		"web/static/workshop/page.html: internal/shop/gone.go: no such file in the repository",
		"web/static/workshop/page.html: internal/shop/test_gone_test.go: no such file in the repository",
		"web/static/workshop/page.html: stage_z.go: not in internal/shop, where the page places it",
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkPaths found\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}
