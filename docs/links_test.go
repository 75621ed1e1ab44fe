package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"regexp"
	"strings"
	"unicode"
)

// linkError is one link that does not resolve.
type linkError struct {
	file   string
	line   int
	target string
	reason string
}

func (e linkError) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", e.file, e.line, e.target, e.reason)
}

var (
	// inlineLink matches [text](target) and ![alt](target), with an
	// optional "title"; the text may hold one level of brackets.
	inlineLink = regexp.MustCompile(`\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refDefinition matches a reference definition: [label]: target.
	refDefinition = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	// atxHeading matches "# Heading" to "###### Heading".
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	// htmlAnchor matches <a name="x"> and id="x" in HTML.
	htmlAnchor = regexp.MustCompile(`<[a-zA-Z][^>]*\s(?:name|id)="([^"]+)"`)
	// htmlTag matches an HTML tag, which a heading's slug leaves out.
	htmlTag = regexp.MustCompile(`<[^>]+>`)
	// headingLink matches a link in a heading, whose text stays.
	headingLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// fence reports whether a line opens or closes a fenced code block, and
// with which marker.
func fence(line string) (string, bool) {
	trimmed := strings.TrimLeft(line, " ")
	if len(line)-len(trimmed) > 3 {
		return "", false
	}
	for _, marker := range []string{"```", "~~~"} {
		if strings.HasPrefix(trimmed, marker) {
			n := len(trimmed) - len(strings.TrimLeft(trimmed, marker[:1]))
			return strings.Repeat(marker[:1], n), true
		}
	}
	return "", false
}

// page is what the checker needs of one Markdown file.
type page struct {
	anchors map[string]bool
	links   []link
}

type link struct {
	line   int
	target string
}

// parse reads the headings (as GitHub's anchors) and the links of a
// Markdown text, leaving out fenced code blocks and code spans.
func parse(text string) page {
	p := page{anchors: map[string]bool{}}
	seen := map[string]int{}
	var open string // the marker of the fenced code block we are in
	scanner := bufio.NewScanner(strings.NewReader(text))
	scanner.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for n := 1; scanner.Scan(); n++ {
		line := scanner.Text()
		if marker, ok := fence(line); ok {
			switch {
			case open == "":
				open = marker
				continue
			case strings.HasPrefix(marker, open) && strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), marker[:1])) == "":
				open = ""
				continue
			}
		}
		if open != "" {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			p.anchors[m[1]] = true
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			slug := Slug(m[2])
			if k := seen[slug]; k > 0 {
				seen[slug]++
				slug = fmt.Sprintf("%s-%d", slug, k)
			} else {
				seen[slug] = 1
			}
			p.anchors[slug] = true
		}
		if m := refDefinition.FindStringSubmatch(line); m != nil {
			p.links = append(p.links, link{n, m[1]})
			continue
		}
		code := withoutCodeSpans(line)
		for _, m := range inlineLink.FindAllStringSubmatch(code, -1) {
			p.links = append(p.links, link{n, m[1]})
		}
	}
	return p
}

// withoutCodeSpans removes the inline code spans of a line, whose text is
// not a link: a run of backticks up to the next run of the same length.
func withoutCodeSpans(line string) string {
	var b strings.Builder
	for {
		start := strings.IndexByte(line, '`')
		if start < 0 {
			b.WriteString(line)
			return b.String()
		}
		n := len(line[start:]) - len(strings.TrimLeft(line[start:], "`"))
		rest := line[start+n:]
		end := -1
		for i := 0; i < len(rest); {
			j := strings.IndexByte(rest[i:], '`')
			if j < 0 {
				break
			}
			run := len(rest[i+j:]) - len(strings.TrimLeft(rest[i+j:], "`"))
			if run == n {
				end = i + j
				break
			}
			i += j + run
		}
		if end < 0 {
			// No closing run: the backticks are literal.
			b.WriteString(line[:start+n])
			line = rest
			continue
		}
		b.WriteString(line[:start])
		line = rest[end+n:]
	}
}

// Slug is the anchor GitHub gives a heading: its text as rendered
// (code spans, links and emphasis reduced to their text), in lower case,
// without punctuation other than "-" and "_", spaces turned into "-".
// A second heading with the same slug gets "-1", a third "-2".
func Slug(heading string) string {
	text := headingLink.ReplaceAllString(heading, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// external reports whether a target leaves the repository: a URL with a
// scheme (https:, mailto:) or a protocol-relative one.
func external(target string) bool {
	if strings.HasPrefix(target, "//") {
		return true
	}
	u, err := url.Parse(target)
	return err == nil && u.Scheme != ""
}

// checkLinks checks the relative links of the Markdown files (paths in
// fsys): the file or folder they name exists, and an #anchor in a Markdown
// file (the same one if the link is only "#anchor") names a heading there.
func checkLinks(fsys fs.FS, files []string) ([]linkError, error) {
	pages := map[string]page{}
	load := func(name string) (page, error) {
		if p, ok := pages[name]; ok {
			return p, nil
		}
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return page{}, err
		}
		p := parse(string(data))
		pages[name] = p
		return p, nil
	}
	var errs []linkError
	for _, file := range files {
		p, err := load(file)
		if err != nil {
			return nil, err
		}
		for _, l := range p.links {
			if external(l.target) {
				continue
			}
			bad := func(reason string) {
				errs = append(errs, linkError{file: file, line: l.line, target: l.target, reason: reason})
			}
			target, anchor, _ := strings.Cut(l.target, "#")
			target, _, _ = strings.Cut(target, "?")
			target, err := url.PathUnescape(target)
			if err != nil {
				bad("not a valid path")
				continue
			}
			name := file
			if target != "" {
				if strings.HasPrefix(target, "/") {
					name = path.Clean(strings.TrimPrefix(target, "/"))
				} else {
					name = path.Join(path.Dir(file), target)
				}
			}
			if name == ".." || strings.HasPrefix(name, "../") {
				bad("outside the repository")
				continue
			}
			info, err := fs.Stat(fsys, name)
			if err != nil {
				bad("no such file or folder")
				continue
			}
			if anchor == "" || info.IsDir() || !strings.HasSuffix(name, ".md") {
				continue
			}
			to, err := load(name)
			if err != nil {
				return nil, err
			}
			if !to.anchors[anchor] {
				bad(fmt.Sprintf("no heading with anchor %q in %s", anchor, name))
			}
		}
	}
	return errs, nil
}
