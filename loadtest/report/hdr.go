package report

import (
	"bytes"
	"fmt"
	"os"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// WriteHDR writes an attack's latency distribution in the format of
// `vegeta report -type=hdrplot`, which the HdrHistogram plotter reads.
func WriteHDR(path string, m *vegeta.Metrics) error {
	var buf bytes.Buffer
	if err := vegeta.NewHDRHistogramPlotReporter(m).Report(&buf); err != nil {
		return fmt.Errorf("HDR histogram: %w", err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("HDR histogram: %w", err)
	}
	return nil
}
