// Package tracker keeps the scheduler's view of DRA state consistent across
// scheduling cycles, in three layers: an assume cache for ResourceClaims (so
// PreBind's writes are visible before the informer catches up), in-flight
// allocations between Reserve and PreBind (so two pods never get the same
// device), and an event-driven set of allocated devices merged with the
// in-flight ones.
//
// The tracker arrives with the scheduler issue; until then this package only
// documents where it will live.
package tracker
