// SPDX-License-Identifier: Apache-2.0

package main

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestBPFHeadersNoCycle: no two of the tree's BPF headers depend on each
// other, directly or through others. overdue.h and schedext.h once called
// into each other (#41), so neither could be read, or moved, alone; what
// needs both goes in a third header included after them (overdue_cpu.h).
func TestBPFHeadersNoCycle(t *testing.T) {
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "build"):
			return filepath.SkipDir
		// vmlinux.h is the kernel's types: it uses nothing of ours, and
		// reading its 100,000 lines would only slow the test.
		case !d.IsDir() && strings.HasSuffix(p, ".h") && d.Name() != "vmlinux.h":
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(files, "internal/schedext/bpf/schedext.h") {
		t.Fatalf("the walk found %v, not internal/schedext/bpf/schedext.h: fix the test", files)
	}
	deps, err := headerDeps(files)
	if err != nil {
		t.Fatal(err)
	}
	if c := depCycle(deps); c != nil {
		t.Errorf("BPF headers depend on each other: %s: move what needs both into a header included after them", strings.Join(c, " -> "))
	}
}

// The check finds the cycle overdue.h and schedext.h had, and none once the
// function that used both moved to a third header.
func TestHeaderDepsFindCycle(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	overdue := write("overdue.h", "static u64 task_enq_at(struct task_struct *p);\n"+
		"static void evacuate_cpu(u64 dsq)\n{\n\ttask_enq_at(0);\n}\n")
	schedext := write("schedext.h", "/* evacuate_cpu() in a comment is no use */\n"+
		"static u64 task_enq_at(struct task_struct *p)\n{\n\treturn 0;\n}\n"+
		"static __always_inline void cpu_going_offline(s32 cpu,\n\t\tconst u64 *dsqs)\n{\n\tevacuate_cpu(dsqs[0]);\n}\n")
	deps, err := headerDeps([]string{overdue, schedext})
	if err != nil {
		t.Fatal(err)
	}
	if c := depCycle(deps); len(c) != 3 || c[0] != c[2] {
		t.Fatalf("cycle %v, want overdue.h and schedext.h", c)
	}
	schedext = write("schedext.h", "static u64 task_enq_at(struct task_struct *p)\n{\n\treturn 0;\n}\n")
	third := write("overdue_cpu.h", "static __always_inline void cpu_going_offline(s32 cpu, const u64 *dsqs)\n{\n\tevacuate_cpu(dsqs[0]);\n}\n")
	if deps, err = headerDeps([]string{overdue, schedext, third}); err != nil {
		t.Fatal(err)
	}
	if c := depCycle(deps); c != nil {
		t.Fatalf("cycle %v after the split", c)
	}
	if !slices.Contains(deps[third], overdue) {
		t.Fatalf("overdue_cpu.h depends on %v, want overdue.h", deps[third])
	}
}

var (
	cComment = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	cString  = regexp.MustCompile(`"(?:\\.|[^"\\\n])*"`)
	cIdent   = regexp.MustCompile(`\b[A-Za-z_]\w*\b`)
	// What a header defines: function bodies (not declarations), maps and
	// other sections' globals, macros, structs.
	cDefs = []*regexp.Regexp{
		regexp.MustCompile(`(?m)^static\b[^;{}]*?\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{`),
		regexp.MustCompile(`\}\s*([A-Za-z_]\w*)\s+SEC\(`),
		regexp.MustCompile(`(?m)^#define\s+([A-Za-z_]\w*)`),
		regexp.MustCompile(`(?m)^struct\s+([A-Za-z_]\w*)\s*\{`),
	}
)

// headerDeps maps each file to the others whose definitions it uses
// (outside comments and strings).
func headerDeps(files []string) (map[string][]string, error) {
	code := map[string]string{}
	definedIn := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		c := cString.ReplaceAllString(cComment.ReplaceAllString(string(b), " "), `""`)
		code[f] = c
		for _, re := range cDefs {
			for _, m := range re.FindAllStringSubmatch(c, -1) {
				if !slices.Contains(definedIn[m[1]], f) {
					definedIn[m[1]] = append(definedIn[m[1]], f)
				}
			}
		}
	}
	deps := map[string][]string{}
	for _, f := range files {
		for _, id := range cIdent.FindAllString(code[f], -1) {
			for _, g := range definedIn[id] {
				if g != f && !slices.Contains(deps[f], g) {
					deps[f] = append(deps[f], g)
				}
			}
		}
	}
	return deps, nil
}

// depCycle is one cycle in deps as a path that ends where it starts, or nil.
func depCycle(deps map[string][]string) []string {
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(string) []string
	visit = func(f string) []string {
		state[f] = open
		stack = append(stack, f)
		for _, g := range deps[f] {
			switch state[g] {
			case open:
				i := slices.Index(stack, g)
				return append(slices.Clone(stack[i:]), g)
			case unseen:
				if c := visit(g); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[f] = done
		return nil
	}
	for _, f := range slices.Sorted(maps.Keys(deps)) {
		if state[f] == unseen {
			if c := visit(f); c != nil {
				return c
			}
		}
	}
	return nil
}
