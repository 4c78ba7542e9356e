// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestREADMELayoutMatchesPackages keeps README's layout block and `go list
// ./...` in step: every package has a line, and every line names a directory
// that exists. A line may name several siblings as dir/{a,b}.
func TestREADMELayoutMatchesPackages(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, filepath.ToSlash(rel))
	}

	listed := readmeLayout(t)
	for _, p := range pkgs {
		if !slices.Contains(listed, p) {
			t.Errorf("package %s is not in README's layout block: add a line for it", p)
		}
	}
	for _, l := range listed {
		if st, err := os.Stat(l); err != nil || !st.IsDir() {
			t.Errorf("README's layout names %s, which is not a directory: remove or fix the line", l)
		}
	}
}

// readmeLayout returns the directories README's "## Layout" code block names
// at the start of its lines.
func readmeLayout(t *testing.T) []string {
	f, err := os.Open("README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var dirs []string
	section, block := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			section = line == "## Layout"
		case section && strings.HasPrefix(line, "```"):
			if block {
				return dirs
			}
			block = true
		case section && block && line != "" && line[0] != ' ':
			dirs = append(dirs, expand(strings.Fields(line)[0])...)
		}
	}
	if len(dirs) == 0 {
		t.Fatal("README.md has no code block under ## Layout")
	}
	return dirs
}

// expand turns dir/{a,b} into dir/a and dir/b.
func expand(s string) []string {
	open, end := strings.Index(s, "{"), strings.Index(s, "}")
	if open < 0 || end < open {
		return []string{s}
	}
	var out []string
	for _, part := range strings.Split(s[open+1:end], ",") {
		out = append(out, s[:open]+part+s[end+1:])
	}
	return out
}
