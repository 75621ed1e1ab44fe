package docs

import (
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// markdownFiles lists the Markdown files of the repository: README.md,
// docs/ and every other folder's README or page, leaving out build output
// and hidden folders.
func markdownFiles(t *testing.T, fsys fs.FS) []string {
	t.Helper()
	var files []string
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			base := path.Base(name)
			if name != "." && (strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") || base == "testdata" || base == "vendor") {
				return fs.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") {
			files = append(files, name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestLinks: every relative link and anchor in the repository's Markdown
// resolves.
func TestLinks(t *testing.T) {
	fsys := os.DirFS("..")
	files := markdownFiles(t, fsys)
	for _, want := range []string{"README.md", "docs/install.md", "docs/configuration.md", "docs/troubleshooting.md", "pkg/plugins/dra/README.md", "pkg/allocator/README.md"} {
		if !slices.Contains(files, want) {
			t.Errorf("%s is not among the checked files", want)
		}
	}
	errs, err := checkLinks(fsys, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		t.Error(e)
	}
}

// TestIndex: every page of docs/ is linked from README.md or from a page
// that README.md links, so a reader finds it from the front door.
func TestIndex(t *testing.T) {
	fsys := os.DirFS("..")
	reached := map[string]bool{}
	queue := []string{"README.md"}
	for len(queue) > 0 {
		file := queue[0]
		queue = queue[1:]
		if reached[file] {
			continue
		}
		reached[file] = true
		data, err := fs.ReadFile(fsys, file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range parse(string(data)).links {
			target, _, _ := strings.Cut(l.target, "#")
			if target == "" || external(target) || !strings.HasSuffix(target, ".md") {
				continue
			}
			queue = append(queue, path.Join(path.Dir(file), target))
		}
	}
	for _, file := range markdownFiles(t, fsys) {
		if strings.HasPrefix(file, "docs/") && !reached[file] {
			t.Errorf("%s is not reachable by links from README.md", file)
		}
	}
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Install with Helm": "install-with-helm",
		"The scheduler (`cmd/scheduler`, `pkg/plugins/dra`)": "the-scheduler-cmdscheduler-pkgpluginsdra",
		"kubectl drasched explain":                           "kubectl-drasched-explain",
		"Claim state and failures":                           "claim-state-and-failures",
		"`StructuredDRAArgs`":                                "structureddraargs",
		"Why a pod is pending":                               "why-a-pod-is-pending",
		"What is different — in short":                       "what-is-different--in-short",
		"[Linked](other.md) heading":                         "linked-heading",
		"**Bold** and snake_case":                            "bold-and-snake_case",
		"Node-allocatable resources (alpha)":                 "node-allocatable-resources-alpha",
		"  Trailing hashes ##":                               "trailing-hashes",
	} {
		if got := Slug(strings.TrimSuffix(heading, " ##")); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestCheckLinks: the checker finds broken links and passes good ones.
func TestCheckLinks(t *testing.T) {
	fsys := fstest.MapFS{
		"README.md":                    {Data: []byte("# drasched\n\n## Install\n\n## Install\n")},
		"docs/install.md":              {Data: []byte("# Install\n\n## With Helm\n\n<a name=\"old-name\"></a>\n\n## `StructuredDRAArgs`\n")},
		"docs/design/note.md":          {Data: []byte("# Note\n")},
		"pkg/allocator/search.go":      {Data: []byte("package allocator\n")},
		"bench/results/plots/fill.svg": {Data: []byte("<svg/>")},
	}
	for name, tc := range map[string]struct {
		text string
		// want are the targets reported as broken, in order.
		want []string
	}{
		"good links": {text: "[a](install.md) [b](install.md#with-helm) [c](#top) [d](../README.md#install-1) " +
			"[e](design/note.md) [f](design/) [g](../pkg/allocator/search.go#L3) ![h](../bench/results/plots/fill.svg) " +
			"[i](https://example.com/x.md#nothing) [j](mailto:a@b.c) [k](install.md#old-name) [l](install.md#structureddraargs) " +
			"[m](/docs/install.md#with-helm)\n\n# Top\n"},
		"missing file":             {text: "See [install](instal.md).\n", want: []string{"instal.md"}},
		"missing folder":           {text: "[x](designs/)\n", want: []string{"designs/"}},
		"missing anchor":           {text: "[x](install.md#helm)\n", want: []string{"install.md#helm"}},
		"missing anchor, own page": {text: "# Page\n\n[x](#pages)\n", want: []string{"#pages"}},
		"anchor of a duplicate":    {text: "[x](../README.md#install-2)\n", want: []string{"../README.md#install-2"}},
		"outside the repository":   {text: "[x](../../../etc/passwd)\n", want: []string{"../../../etc/passwd"}},
		"image":                    {text: "![plot](../bench/results/plots/churn.svg)\n", want: []string{"../bench/results/plots/churn.svg"}},
		"reference definition":     {text: "[x][ref]\n\n[ref]: missing.md\n", want: []string{"missing.md"}},
		"link text with brackets":  {text: "[see [this]](gone.md)\n", want: []string{"gone.md"}},
		"two on a line":            {text: "[a](install.md) and [b](gone.md#x)\n", want: []string{"gone.md#x"}},
		"in code: not a link":      {text: "`[a](gone.md)`\n\n```md\n[b](gone.md)\n```\n\n~~~\n[c](gone.md)\n~~~\n"},
		"after a code block":       {text: "```\n[a](gone.md)\n```\n[b](gone.md)\n", want: []string{"gone.md"}},
	} {
		t.Run(name, func(t *testing.T) {
			fsys := cloneFS(fsys)
			fsys["docs/page.md"] = &fstest.MapFile{Data: []byte(tc.text)}
			errs, err := checkLinks(fsys, []string{"docs/page.md"})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, e.target)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("broken links %q, want %q; errors: %v", got, tc.want, errs)
			}
		})
	}
}

func cloneFS(m fstest.MapFS) fstest.MapFS {
	c := fstest.MapFS{}
	for k, v := range m {
		c[k] = v
	}
	return c
}

// TestPackageMaps: the READMEs that map a package's files to upstream's
// name every Go file of the package, and only files that exist; the
// plugin's package doc names every file too.
func TestPackageMaps(t *testing.T) {
	fsys := os.DirFS("..")
	for _, dir := range []string{"pkg/plugins/dra", "pkg/allocator"} {
		entries, err := fs.ReadDir(fsys, dir)
		if err != nil {
			t.Fatal(err)
		}
		var files []string
		for _, e := range entries {
			if name := e.Name(); !e.IsDir() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") && name != "doc.go" {
				files = append(files, name)
			}
		}
		readme, err := fs.ReadFile(fsys, path.Join(dir, "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if !strings.Contains(string(readme), "`"+f+"`") {
				t.Errorf("%s/README.md does not name %s", dir, f)
			}
		}
		// The first column of the table names files of the package.
		for _, line := range strings.Split(string(readme), "\n") {
			cells := strings.Split(line, "|")
			if len(cells) < 3 || !strings.Contains(cells[1], "`") {
				continue
			}
			for _, name := range strings.Split(cells[1], ",") {
				name = strings.Trim(strings.TrimSpace(name), "`")
				if _, err := fs.Stat(fsys, path.Join(dir, name)); err != nil {
					t.Errorf("%s/README.md names %s, which does not exist", dir, name)
				}
			}
		}
		if dir == "pkg/plugins/dra" {
			src, err := fs.ReadFile(fsys, path.Join(dir, "plugin.go"))
			if err != nil {
				t.Fatal(err)
			}
			doc, _, _ := strings.Cut(string(src), "\npackage ")
			for _, f := range files {
				if !strings.Contains(doc, f) {
					t.Errorf("the package doc in %s/plugin.go does not name %s", dir, f)
				}
			}
		}
	}
}
