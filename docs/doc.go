// Package docs holds drasched's documentation pages (Markdown) and the
// tests that keep them true: every relative link and #anchor in README.md,
// docs/ and the package READMEs must resolve, as GitHub resolves it; the
// configuration table must name every StructuredDRAArgs field with its
// default. Its one exported function, CheckMetricsTable, is for the tests
// of the packages that register metrics: they alone can reach their
// metric objects, and it compares them with a page's metrics table.
package docs
