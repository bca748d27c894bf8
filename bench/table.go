package bench

import (
	"fmt"
	"os"
	"strings"
)

// benchRow is one line of the Markdown results table that `make bench`
// writes: a scenario's figure beside its baseline measured in the same run.
type benchRow struct {
	scenario string // what was measured, as the command names it
	unit     string // records/s, MB/s, ms
	baseline string // the baseline's name and median figure, or "—"
	sluice   string // sluice's median figure
	ratio    string // sluice/baseline, or "—"
	aim      string // the target, or "—"
}

// benchResultsHeader opens the table a --results file collects.
const benchResultsHeader = "| scenario | unit | baseline (median) | sluice (median) | ratio | aim |\n|---|---|---|---|---|---|\n"

// appendBenchRow writes row to path, after the header when the file does
// not end in a table row; an empty path writes nothing.
func appendBenchRow(path string, row benchRow) error {
	if path == "" {
		return nil
	}
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	var b strings.Builder
	if !strings.HasSuffix(string(old), "|\n") {
		if len(old) > 0 && !strings.HasSuffix(string(old), "\n\n") {
			b.WriteString("\n")
		}
		b.WriteString(benchResultsHeader)
	}
	b.WriteString(markdownRow(row.scenario, row.unit, row.baseline, row.sluice, row.ratio, row.aim))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(b.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// markdownRow is one row of a Markdown table: an empty cell shows "—", a
// "|" in a cell becomes "/".
func markdownRow(cells ...string) string {
	var b strings.Builder
	b.WriteString("|")
	for _, c := range cells {
		if c == "" {
			c = "—"
		}
		b.WriteString(" " + strings.ReplaceAll(c, "|", "/") + " |")
	}
	b.WriteString("\n")
	return b.String()
}

// ratioCell formats sluice/baseline with two decimals.
func ratioCell(sluice, baseline float64) string {
	if baseline <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", sluice/baseline)
}
