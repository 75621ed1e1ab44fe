// Package docs holds drasched's documentation pages (Markdown) and the
// tests that keep them true: every relative link and #anchor in README.md,
// docs/ and the package READMEs must resolve, as GitHub resolves it; the
// configuration table must name every StructuredDRAArgs field with its
// default. The metrics tables are checked by the tests of the packages
// that register the metrics (internal/metricstable).
package docs
