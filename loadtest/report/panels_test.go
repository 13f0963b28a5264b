package report

import (
	"strings"
	"testing"
)

func TestPanelsSVGDrawsEveryPanelAndLine(t *testing.T) {
	svg, err := PanelsSVG("items", true, []Panel{
		{Title: "Instance CPU, idle", YLabel: "ms per s", Lines: []Line{{Label: "before", Points: []Point{{1000, 619}, {10000, 452}}}}},
		{Title: "Redis commands, idle", YLabel: "commands per s", Lines: []Line{{Points: []Point{{1000, 10}, {10000, 10}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "Instance CPU, idle", "Redis commands, idle", "before", "items"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("the chart has no %q", want)
		}
	}
}

func TestPanelsSVGRefusesWhatItCannotDraw(t *testing.T) {
	if _, err := PanelsSVG("items", false, nil); err == nil {
		t.Error("no panels: drawn")
	}
	if _, err := PanelsSVG("items", true, []Panel{{Title: "t", Lines: []Line{{Points: []Point{{0, 1}}}}}}); err == nil {
		t.Error("x = 0 on a log scale: drawn")
	}
}
