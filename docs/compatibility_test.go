package docs

import (
	"bufio"
	"fmt"
	"go/build/constraint"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestTaggedFilesListed: every Go file built only for some Kubernetes minors
// (a build constraint on a kube1.N tag) is named after the newest minor it
// is built for (*_kube1NN.go) and is listed in compatibility.md, itself or
// through a twin of the same name for another minor, so the differences
// between minors stay reviewable in one place.
func TestTaggedFilesListed(t *testing.T) {
	fsys := os.DirFS("..")
	page, err := fs.ReadFile(fsys, "docs/compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	minors := buildMinors(t, fsys)
	named := regexp.MustCompile(`kube1([0-9]+)(_test)?\.go$`)
	found := 0
	err = fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if base := path.Base(name); name != "." && (strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") || base == "testdata") {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		line, err := buildConstraint(fsys, name)
		if err != nil || !strings.Contains(line, "kube1.") {
			return err
		}
		found++
		expr, err := constraint.Parse("//go:build " + line)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		// The newest minor whose build (its tag; none for the newest)
		// selects the file.
		newest := 0
		for _, m := range minors {
			tag := fmt.Sprintf("kube1.%d", m)
			if m == minors[len(minors)-1] {
				tag = ""
			}
			if expr.Eval(func(t string) bool { return t == tag }) {
				newest = m
			}
		}
		m := named.FindStringSubmatch(name)
		switch {
		case m == nil:
			t.Errorf("%s: built only for some minors (%s) but not named after the minor (*_kube1NN.go)", name, line)
		case newest == 0:
			t.Errorf("%s: no build of the minors %v selects it (%s)", name, minors, line)
		case m[1] != fmt.Sprint(newest):
			t.Errorf("%s: named after 1.%s, but the newest minor it is built for is 1.%d (%s)", name, m[1], newest, line)
		}
		listed := false
		if m != nil {
			prefix := strings.TrimSuffix(name, "kube1"+m[1]+m[2]+".go")
			for _, other := range minors {
				if strings.Contains(string(page), fmt.Sprintf("`%skube1%d%s.go`", prefix, other, m[2])) {
					listed = true
				}
			}
		}
		if !listed {
			t.Errorf("%s (%s) is not listed in docs/compatibility.md", name, line)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no file with a kube1.N build constraint found; the walk is broken")
	}
}

// buildMinors are the minors drasched builds for, oldest first: those of
// hack/minor/* and go.mod's, the newest.
func buildMinors(t *testing.T, fsys fs.FS) []int {
	t.Helper()
	gomod, err := fs.ReadFile(fsys, "go.mod")
	if err != nil {
		t.Fatal(err)
	}
	newest := regexp.MustCompile(`(?m)^\s*k8s.io/kubernetes v1\.([0-9]+)\.`).FindSubmatch(gomod)
	if newest == nil {
		t.Fatal("go.mod requires no k8s.io/kubernetes")
	}
	entries, err := fs.ReadDir(fsys, "hack/minor")
	if err != nil {
		t.Fatal(err)
	}
	var minors []int
	for _, name := range append([]string{"1." + string(newest[1])}, func() []string {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}()...) {
		m, err := strconv.Atoi(strings.TrimPrefix(name, "1."))
		if err != nil {
			t.Fatalf("hack/minor/%s: %v", name, err)
		}
		minors = append(minors, m)
	}
	slices.Sort(minors)
	return minors
}

// buildConstraint is the file's //go:build line, "" if it has none.
func buildConstraint(fsys fs.FS, name string) (string, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := scanner.Text()
		if strings.HasPrefix(line, "//go:build ") {
			return strings.TrimPrefix(line, "//go:build "), nil
		}
		if strings.HasPrefix(line, "package ") {
			break
		}
	}
	return "", scanner.Err()
}
