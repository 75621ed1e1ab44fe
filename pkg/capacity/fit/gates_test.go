package fit_test

import "github.com/drasched/drasched/internal/minor/minortest"

// The DRA features these tests exercise are on, as in 1.36 and later,
// also in the build for 1.35, where they are alpha.
func init() { minortest.EnableDRAFeatures() }
