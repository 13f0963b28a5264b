// Package report writes what a lab run found: results.json (Report, read
// by the dashboard), report.md and the tables on the terminal, the
// latency plots and HDR files, the SVG charts, the CPU tables and the CPU
// targets, and, for a sweep or repeated rounds, the knees, the capacity
// model (the USL fit) and the median runs. It reads results, never a
// flag: the CLI hands it a Report.
package report
