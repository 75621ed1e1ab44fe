// Package docs holds drasched's documentation pages (Markdown) and the test
// that keeps their links working: every relative link and #anchor in
// README.md, docs/ and the package READMEs must resolve, as GitHub resolves
// it. It has no Go code of its own.
package docs
