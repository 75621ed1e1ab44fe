// Package minortest sets, for the unit tests of a build for an older
// Kubernetes minor, the DRA feature gates that the tests exercise and that
// are on by default from 1.36 on: in 1.35 they are alpha and off. A test
// package calls EnableDRAFeatures from an init function of one of its test
// files. In the builds for 1.36 and 1.37 it changes nothing.
package minortest
