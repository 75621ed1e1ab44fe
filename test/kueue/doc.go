// Package kueue tests drasched under Kueue, as teams that share GPUs run it:
// Kueue (built from the module pinned in hack/kueue/go.mod, installed from
// its own chart by internal/kueue) admits batch/v1 Jobs by quota for DRA
// devices, kube-controller-manager's Job controller starts and stops their
// pods, the ResourceClaim controller makes their claims from templates, and
// drasched places them, all against a real kube-apiserver in this process.
// The checks are what users see through the API: which workloads Kueue
// admitted and evicted, which pods are bound, and that no device is in two
// claims.
package kueue
