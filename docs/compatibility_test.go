package docs

import (
	"bufio"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"
	"testing"
)

// TestTaggedFilesListed: every Go file built only for some Kubernetes minors
// (a build constraint on a kube1.N tag) is named after its minor and is
// listed in compatibility.md, itself or through its twin for the other
// minor, so the differences between minors stay reviewable in one place.
func TestTaggedFilesListed(t *testing.T) {
	fsys := os.DirFS("..")
	page, err := fs.ReadFile(fsys, "docs/compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`kube1[0-9]+(_test)?\.go$`)
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
		constraint, err := buildConstraint(fsys, name)
		if err != nil || !strings.Contains(constraint, "kube1.") {
			return err
		}
		found++
		if !named.MatchString(name) {
			t.Errorf("%s: built only for some minors (%s) but not named after the minor (*_kube1NN.go)", name, constraint)
		}
		twin := strings.Replace(name, "kube137", "kube136", 1)
		if !strings.Contains(string(page), "`"+name+"`") && !strings.Contains(string(page), "`"+twin+"`") {
			t.Errorf("%s (%s) is not listed in docs/compatibility.md", name, constraint)
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
