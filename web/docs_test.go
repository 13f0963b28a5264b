package web_test

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// The README is a quickstart; the reference lives in docs/. These tests keep
// the two joined: every relative link resolves, the README stays short and
// links every page, and the Chinese quickstart names the same commands and
// pages. docs/workshop/ has its own tests and is left out here.
// docpaths_test.go checks the file names the pages write outside links.

// readmeWordLimit is the most words README.md may have, counted as wc -w
// counts them.
const readmeWordLimit = 1200

// docPages are the pages README.md must link to, relative to the repository.
var docPages = []string{
	"docs/stages.md", "docs/api.md", "docs/performance.md", "docs/testing.md",
	"docs/operations.md", "docs/lab.md", "docs/layout.md", "docs/docker.md",
	"RELIABILITY.md",
}

var (
	// mdFence matches a fenced code block, whose text is no markdown.
	mdFence = regexp.MustCompile("(?ms)^```.*?^```[^\n]*$")
	// mdCode matches an inline code span, which may run across a line break.
	mdCode = regexp.MustCompile("`[^`]*`")
	// mdLink matches the target of an inline link or image: [text](target).
	mdLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// mdRefLink matches the target of a reference definition: [name]: target.
	mdRefLink = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$`)
	// mdInlineLink matches a whole inline link, its text in the group.
	mdInlineLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	// mdHeading matches an ATX heading and its text.
	mdHeading = regexp.MustCompile(`(?m)^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$`)
	// urlScheme matches a link that leaves the repository.
	urlScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// stripCode drops fenced blocks and inline code spans from markdown, so that
// neither a shell comment nor a bracket in code reads as markdown.
func stripCode(md string) string {
	return mdCode.ReplaceAllString(mdFence.ReplaceAllString(md, ""), "")
}

// mdLinks lists the link targets of a markdown text, in order.
func mdLinks(md string) []string {
	md = stripCode(md)
	var links []string
	for _, re := range []*regexp.Regexp{mdLink, mdRefLink} {
		for _, m := range re.FindAllStringSubmatch(md, -1) {
			links = append(links, m[1])
		}
	}
	return links
}

// slug is GitHub's anchor for a heading's text: lowercase, every character
// but letters, digits, underscores, hyphens and spaces dropped, spaces
// turned into hyphens. Markup in the heading (emphasis, code, link targets)
// is dropped first, as GitHub anchors the rendered text.
func slug(heading string) string {
	heading = mdInlineLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors lists the anchors GitHub gives the headings of a markdown text; a
// repeated heading gets -1, -2, ... as GitHub numbers them.
func anchors(md string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, m := range mdHeading.FindAllStringSubmatch(mdFence.ReplaceAllString(md, ""), -1) {
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// checkLinks checks every relative link of the markdown file name (a
// slash-separated path under root): its file must exist, and an #anchor
// must name a heading of the markdown file it points to. It returns one
// line per broken link.
func checkLinks(root, name string) []string {
	raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		return []string{err.Error()}
	}
	var broken []string
	for _, link := range mdLinks(string(raw)) {
		if urlScheme.MatchString(link) || strings.HasPrefix(link, "//") {
			continue
		}
		target, anchor, _ := strings.Cut(link, "#")
		file := name
		if target != "" {
			if strings.HasPrefix(target, "/") {
				broken = append(broken, fmt.Sprintf("%s: %s: an absolute path, which GitHub resolves from the site, not the repository", name, link))
				continue
			}
			file = path.Clean(path.Join(path.Dir(name), target))
			if file == ".." || strings.HasPrefix(file, "../") {
				broken = append(broken, fmt.Sprintf("%s: %s: outside the repository", name, link))
				continue
			}
		}
		body, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			if info, serr := os.Stat(filepath.Join(root, filepath.FromSlash(file))); serr == nil && info.IsDir() && anchor == "" {
				continue // a folder: GitHub lists it
			}
			broken = append(broken, fmt.Sprintf("%s: %s: no file %s", name, link, file))
			continue
		}
		if anchor == "" {
			continue
		}
		if !strings.HasSuffix(file, ".md") {
			broken = append(broken, fmt.Sprintf("%s: %s: an anchor into %s, which is not markdown", name, link, file))
			continue
		}
		if !anchors(string(body))[anchor] {
			broken = append(broken, fmt.Sprintf("%s: %s: %s has no heading #%s", name, link, file, anchor))
		}
	}
	return broken
}

// docFiles lists the markdown files whose links TestDocLinksResolve checks:
// the two READMEs, docs/*.md and the facilitator's kit, docs/workshop/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "README.zh-CN.md"}
	pages, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("found no docs/*.md")
	}
	for _, p := range pages {
		files = append(files, "docs/"+filepath.Base(p))
	}
	kit, err := filepath.Glob(filepath.Join("..", "docs", "workshop", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range kit {
		files = append(files, "docs/workshop/"+filepath.Base(p))
	}
	return files
}

// TestDocLinksResolve checks every relative link of the READMEs and of
// docs/*.md: the file it names exists, and its #anchor is a heading there.
func TestDocLinksResolve(t *testing.T) {
	for _, name := range docFiles(t) {
		for _, b := range checkLinks("..", name) {
			t.Error(b)
		}
	}
}

// readDoc reads a file of the repository by its slash-separated path.
func readDoc(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// linkedFiles lists the repository files a markdown file at name links to,
// as slash-separated paths from the repository root, anchors dropped.
func linkedFiles(name, md string) []string {
	var files []string
	for _, link := range mdLinks(md) {
		target, _, _ := strings.Cut(link, "#")
		if target == "" || urlScheme.MatchString(target) || strings.HasPrefix(target, "/") {
			continue
		}
		files = append(files, path.Clean(path.Join(path.Dir(name), target)))
	}
	return files
}

// TestREADMEIsAQuickstart: README.md stays within readmeWordLimit words
// and links every reference page.
func TestREADMEIsAQuickstart(t *testing.T) {
	readme := readDoc(t, "README.md")
	if n := len(strings.Fields(readme)); n > readmeWordLimit {
		t.Errorf("README.md has %d words, more than %d: move the detail to a page under docs/", n, readmeWordLimit)
	}
	linked := linkedFiles("README.md", readme)
	for _, page := range docPages {
		if !slices.Contains(linked, page) {
			t.Errorf("README.md does not link to %s", page)
		}
	}
	if !slices.Contains(linked, "README.zh-CN.md") {
		t.Error("README.md does not link to README.zh-CN.md")
	}
}

// commandPrefixes start the lines of README.md's first code block that are
// commands a reader types.
var commandPrefixes = []string{"make ", "seckill ", "./bin/seckill ", "docker compose "}

// readmeCommands lists the commands of the first fenced block of a README,
// each without its comment.
func readmeCommands(t *testing.T, md string) []string {
	t.Helper()
	block := mdFence.FindString(md)
	if block == "" {
		t.Fatal("README.md has no fenced code block")
	}
	var cmds []string
	for _, line := range strings.Split(block, "\n") {
		cmd, _, _ := strings.Cut(line, "#")
		cmd = strings.Join(strings.Fields(cmd), " ")
		for _, p := range commandPrefixes {
			if strings.HasPrefix(cmd+" ", p) {
				cmds = append(cmds, cmd)
				break
			}
		}
	}
	return cmds
}

// TestChineseREADMEFollowsTheEnglish: README.zh-CN.md names every command of
// README.md's first code block, links to every page README.md links to,
// and links back to README.md.
func TestChineseREADMEFollowsTheEnglish(t *testing.T) {
	en := readDoc(t, "README.md")
	zh := readDoc(t, "README.zh-CN.md")
	cmds := readmeCommands(t, en)
	for _, want := range []string{"make run", "make test", "make story"} {
		if !slices.Contains(cmds, want) {
			t.Errorf("README.md's first code block does not show %q (found %q)", want, cmds)
		}
	}
	for _, cmd := range cmds {
		// The whole command: "make story" is not named by "make storybook".
		named := regexp.MustCompile(`(^|[^\w-])` + regexp.QuoteMeta(cmd) + `($|[^\w-])`)
		if !named.MatchString(zh) {
			t.Errorf("README.zh-CN.md does not name %q, a command of README.md's first code block", cmd)
		}
	}
	zhLinks := linkedFiles("README.zh-CN.md", zh)
	for _, page := range linkedFiles("README.md", en) {
		if page == "README.zh-CN.md" || !strings.HasSuffix(page, ".md") {
			continue
		}
		if !slices.Contains(zhLinks, page) {
			t.Errorf("README.md links to %s, README.zh-CN.md does not", page)
		}
	}
	if !slices.Contains(zhLinks, "README.md") {
		t.Error("README.zh-CN.md does not link back to README.md")
	}
}

// TestDocChecksCatchBrokenLinks runs the link check on a small tree with one
// link of each kind, good and broken, so a check that passes everything
// cannot go unnoticed; and checks the slug rules on headings GitHub anchors.
func TestDocChecksCatchBrokenLinks(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"README.md": "# Top\n\n[ok](docs/a.md) [ok](docs/a.md#make-test-and-ci) [ok](#top) [ok](sub/)\n" +
			"[gone](docs/missing.md) [bad anchor](docs/a.md#no-such-heading) [bad self](#nowhere)\n" +
			"[code anchor](main.go#L1) [far](../outside.md)\n\n" +
			"```sh\n# not a heading\n[not a link](nowhere.md)\n```\n\n`[not a link](nowhere2.md)` <https://example.com> [web](https://example.com/x.md)\n\n[ref]: docs/missing-ref.md\n",
		"docs/a.md": "# A\n\n## `make test` and CI\n\n[ok](../README.md#top) [gone](README.md)\n",
		"main.go":   "package main\n",
		"sub/x.txt": "x\n",
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
	got := append(checkLinks(root, "README.md"), checkLinks(root, "docs/a.md")...)
	want := []string{
		"README.md: docs/missing.md: no file docs/missing.md",
		"README.md: docs/a.md#no-such-heading: docs/a.md has no heading #no-such-heading",
		"README.md: #nowhere: README.md has no heading #nowhere",
		"README.md: main.go#L1: an anchor into main.go, which is not markdown",
		"README.md: ../outside.md: outside the repository",
		"README.md: docs/missing-ref.md: no file docs/missing-ref.md",
		"docs/a.md: README.md: no file docs/README.md",
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkLinks found\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}

	for heading, want := range map[string]string{
		"The seven stages":                      "the-seven-stages",
		"Go 1.26":                               "go-126",
		"`make test` and CI":                    "make-test-and-ci",
		"What a FAIL looks like":                "what-a-fail-looks-like",
		"Stage by stage, and beyond one server": "stage-by-stage-and-beyond-one-server",
		"两条命令，外加一个故事":                           "两条命令外加一个故事",
		"Idempotency-Key":                       "idempotency-key",
		"SECKILL_* settings":                    "seckill_-settings",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
	if a := anchors("# A\n## A\n## A\n"); !a["a"] || !a["a-1"] || !a["a-2"] {
		t.Errorf("repeated headings: anchors %v, want a, a-1, a-2", a)
	}
}
