package report

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// A row's two clocks are saved a second time as HdrHistogram interval
// logs (the .hlog format of HistogramLogWriter), beside vegeta's hdrplot
// files: one histogram per second of the attack, by the second each
// answer came in, so that HistogramLogProcessor, the HdrHistogram log
// analyzer and the other ports' readers can slice and merge them.

// LogInterval is the length of one interval histogram.
const LogInterval = time.Second

// The histograms' range, in ns (the unit the HdrHistogram tools assume):
// 1 µs to an hour, at three significant digits.
const (
	logLowest  = int64(time.Microsecond)
	logHighest = int64(time.Hour)
	logDigits  = 3
)

// The tags of the two clocks' histograms, one per log.
const (
	TagResponseTime = "response-time"
	TagBuyerTime    = "buyer-time"
)

// HDRLogFile names r's response-time interval log, and BuyerHDRLogFile
// its buyer-time one, beside HDRFile's.
func HDRLogFile(r results.Row, sweeping bool) string {
	return strings.TrimSuffix(HDRFile(r, sweeping), ".txt") + ".hlog"
}

// BuyerHDRLogFile names r's buyer-time interval log.
func BuyerHDRLogFile(r results.Row, sweeping bool) string {
	return strings.TrimSuffix(BuyerHDRFile(r, sweeping), ".txt") + ".hlog"
}

// WriteHDRLogs writes the interval logs of samples into dir, under the
// names r records (HDRLog, BuyerHDRLog), which it sets.
func WriteHDRLogs(dir string, r *results.Row, sweeping bool, samples []results.Sample) error {
	if len(samples) == 0 {
		return nil
	}
	response := func(s results.Sample) time.Duration { return s.Answered.Sub(s.Sent) }
	buyer := func(s results.Sample) time.Duration { return s.Answered.Sub(s.Arrived) }
	for _, l := range []struct {
		name, tag string
		value     func(results.Sample) time.Duration
		field     *string
	}{
		{HDRLogFile(*r, sweeping), TagResponseTime, response, &r.HDRLog},
		{BuyerHDRLogFile(*r, sweeping), TagBuyerTime, buyer, &r.BuyerHDRLog},
	} {
		data, err := EncodeHDRLog(samples, l.tag, l.value)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, l.name), data, 0o644)
		}
		if err != nil {
			return fmt.Errorf("HDR interval log %s: %w", l.name, err)
		}
		*l.field = l.name
	}
	return nil
}

// EncodeHDRLog is the interval log of one clock over samples: a
// histogram per LogInterval from the first arrival, each holding the
// values of the answers that came in during it, tagged tag.
func EncodeHDRLog(samples []results.Sample, tag string, value func(results.Sample) time.Duration) ([]byte, error) {
	start := samples[0].Arrived
	for _, s := range samples {
		start = earliest(start, s.Arrived)
	}
	var intervals []*hdr.Histogram
	for _, s := range samples {
		i := int(s.Answered.Sub(start) / LogInterval)
		for len(intervals) <= i {
			h := hdr.New(logLowest, logHighest, logDigits)
			at := start.Add(time.Duration(len(intervals)) * LogInterval)
			h.SetStartTimeMs(at.UnixMilli())
			h.SetEndTimeMs(at.Add(LogInterval).UnixMilli())
			h.SetTag(tag)
			intervals = append(intervals, h)
		}
		v := min(max(int64(value(s)), 0), logHighest)
		if err := intervals[i].RecordValue(v); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	w := hdr.NewHistogramLogWriter(&buf)
	w.SetBaseTime(start.UnixMilli())
	err := firstErr(
		w.OutputLogFormatVersion,
		func() error {
			return w.OutputComment("seckill lab: " + tag + " in ns, one histogram per " + LogInterval.String())
		},
		func() error { return w.OutputStartTime(start.UnixMilli()) },
		func() error { return w.OutputBaseTime(start.UnixMilli()) },
		w.OutputLegend,
	)
	for _, h := range intervals {
		if err != nil {
			break
		}
		err = w.OutputIntervalHistogram(h)
	}
	return buf.Bytes(), err
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// firstErr runs steps in turn until one fails.
func firstErr(steps ...func() error) error {
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// logLink is " · [.hlog](file)" for a row's interval log, or "".
func logLink(file string) string {
	if file == "" {
		return ""
	}
	return fmt.Sprintf(" · [.hlog](%s)", file)
}
