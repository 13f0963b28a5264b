package web_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/internal/config"
)

// The facilitator's kit (docs/workshop/) tells an instructor which
// commands to run, which tests to open and which settings to change. These
// tests keep it true: every page has its Chinese twin (TestDocLinksResolve
// checks its links and anchors), the screenshots are the ones `make workshop-shots`
// copies, and every make target, test name, story flag and SECKILL_
// variable it names exists.

const kitDir = "../docs/workshop"

// kitPages reads every page of the kit, by file name.
func kitPages(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(kitDir, "*.md"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no pages in %s: %v", kitDir, err)
	}
	pages := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		pages[filepath.Base(n)] = string(b)
	}
	return pages
}

func TestKitPagesComeInPairsAndLinkEachOther(t *testing.T) {
	pages := kitPages(t)
	for name, text := range pages {
		twin := strings.TrimSuffix(name, ".zh-CN.md") + ".md"
		if !strings.HasSuffix(name, ".zh-CN.md") {
			twin = strings.TrimSuffix(name, ".md") + ".zh-CN.md"
		}
		if _, ok := pages[twin]; !ok {
			t.Errorf("%s has no twin %s", name, twin)
			continue
		}
		if !strings.Contains(text, "]("+twin+")") {
			t.Errorf("%s does not link to its twin %s", name, twin)
		}
	}
}

func TestKitShowsTheScreenshotsMakeCopies(t *testing.T) {
	mk, err := os.ReadFile("Makefile.inc")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^WORKSHOP_SHOTS\s*:=\s*(.+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("web/Makefile.inc has no WORKSHOP_SHOTS")
	}
	want := strings.Fields(string(m[1]))
	var shown []string
	for name, text := range kitPages(t) {
		for _, l := range mdLinks(text) {
			if img, ok := strings.CutPrefix(l, "img/"); ok && img != "" {
				if !slices.Contains(want, img) {
					t.Errorf("%s shows img/%s, which make workshop-shots does not copy (WORKSHOP_SHOTS)", name, img)
				}
				shown = append(shown, img)
			}
		}
	}
	for _, w := range want {
		if !slices.Contains(shown, w) {
			t.Errorf("make workshop-shots copies %s, which no page of the kit shows", w)
		}
		if _, err := os.Stat(filepath.Join(kitDir, "img", w)); err != nil {
			t.Errorf("docs/workshop/img/%s is missing: run make workshop-shots", w)
		}
	}
}

// makeTargets lists the targets of the Makefile and its included files.
func makeTargets(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob("../*/Makefile.inc")
	more, _ := filepath.Glob("../*/*/Makefile.inc")
	files = append(append(files, "../Makefile"), more...)
	var out []string
	rule := regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range rule.FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1])
		}
	}
	return out
}

func TestKitNamesOnlyRealCommands(t *testing.T) {
	targets := makeTargets(t)
	story, err := os.ReadFile("../cmd/seckill/story.go")
	if err != nil {
		t.Fatal(err)
	}
	var storyFlags []string
	for _, m := range regexp.MustCompile(`c\.fs\.\w+\("([a-z-]+)"`).FindAllSubmatch(story, -1) {
		storyFlags = append(storyFlags, string(m[1]))
	}
	known := config.EnvNames()
	for name, text := range kitPages(t) {
		for _, m := range regexp.MustCompile("(?m)(?:`|^)make ([a-z][a-z0-9-]*)").FindAllStringSubmatch(text, -1) {
			if !slices.Contains(targets, m[1]) {
				t.Errorf("%s says make %s: no such target", name, m[1])
			}
		}
		for _, m := range regexp.MustCompile(`STORY_FLAGS='([^']*)'`).FindAllStringSubmatch(text, -1) {
			for _, f := range strings.Fields(m[1]) {
				if f, ok := strings.CutPrefix(f, "-"); ok && !slices.Contains(storyFlags, f) {
					t.Errorf("%s passes story the flag -%s, which it does not have (%v)", name, f, storyFlags)
				}
			}
		}
		for _, v := range regexp.MustCompile(`SECKILL_[A-Z_]+`).FindAllString(text, -1) {
			if !slices.Contains(known, v) && v != "SECKILL_PUBLISH_IP" { // a compose-file variable (docs/docker.md)
				t.Errorf("%s names %s, which config does not read", name, v)
			}
		}
		// go test -run 'TestA|TestB' ./pkg/: each test exists in that package.
		for _, m := range regexp.MustCompile(`go test -run '([^']+)'(?: -v)? (\./[\w/]+?)/?(?:\s|$)`).FindAllStringSubmatch(text, -1) {
			src := ""
			files, _ := filepath.Glob(filepath.Join("..", m[2], "*_test.go"))
			for _, f := range files {
				b, _ := os.ReadFile(f)
				src += string(b)
			}
			for _, test := range strings.Split(strings.Trim(m[1], "^$()"), "|") {
				if !strings.Contains(src, "func "+test+"(") {
					t.Errorf("%s runs %s in %s: no such test", name, test, m[2])
				}
			}
		}
		// Test names mentioned in passing exist somewhere.
		for _, test := range regexp.MustCompile("`(Test[A-Za-z]+)`").FindAllStringSubmatch(text, -1) {
			if !testExists(t, test[1]) {
				t.Errorf("%s names %s: no such test in the repository", name, test[1])
			}
		}
	}
}

func testExists(t *testing.T, name string) bool {
	t.Helper()
	found := false
	_ = filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil || found {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || d.Name() == "test-artifacts") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			if err == nil && strings.Contains(string(b), "func "+name+"(") {
				found = true
			}
		}
		return nil
	})
	return found
}
