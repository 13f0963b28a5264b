package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// commit is the commit the binary was built from. The Makefile and the
// Dockerfile set it with -ldflags "-X main.commit=...": they build with
// -buildvcs=false (and the image's context has no .git), so Go's own VCS
// stamp is absent there. A plain `go build` in a checkout stamps it, and
// buildInfo falls back to that.
var commit string

const versionAbout = `The module version, the commit the binary was built from, and the Go
toolchain. A binary built outside make, the Dockerfile or a git checkout
says "commit unknown".`

func runVersion(_ context.Context, args []string, stdout io.Writer) error {
	c := newCommand("version", "", versionAbout, false)
	if err := c.parse(args, stdout); err != nil {
		return err
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(info, commit))
	return nil
}

// versionLine is what `seckill version` prints: module path and version,
// commit (with "+dirty" for uncommitted changes when Go stamped it), Go
// version and platform.
func versionLine(info *debug.BuildInfo, stamped string) string {
	mod, ver := "github.com/seckill-lab/seckill", "(unknown)"
	rev, dirty := stamped, false
	if info != nil {
		if info.Main.Path != "" {
			mod, ver = info.Main.Path, info.Main.Version
		}
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision" && rev == "":
				rev = s.Value
			case s.Key == "vcs.modified" && stamped == "":
				dirty = s.Value == "true"
			}
		}
	}
	if rev == "" {
		rev = "unknown"
	}
	if dirty {
		rev += "+dirty"
	}
	return fmt.Sprintf("seckill %s %s commit %s %s %s/%s", mod, ver, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
