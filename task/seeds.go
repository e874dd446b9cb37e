package task

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// readSeeds reads a seeds CSV: a header row of names, then one task instance per row.
func readSeeds(path string) ([]map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("seeds: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("seeds %s: empty file: want a header row of names", path)
	}
	if err != nil {
		return nil, fmt.Errorf("seeds %s: %w", path, err)
	}
	for i, h := range header {
		header[i] = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if !placeholderP.MatchString("<" + header[i] + ">") {
			return nil, fmt.Errorf("seeds %s: column %d: %q is not a placeholder name", path, i+1, header[i])
		}
	}
	var rows []map[string]string
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("seeds %s: %w", path, err)
		}
		row := make(map[string]string, len(header))
		for i, h := range header {
			row[h] = rec[i]
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("seeds %s: no rows after the header", path)
	}
	return rows, nil
}
