// Package harness runs a real single-node cluster on this host for the
// tests of test/node (make test-node) and make demo REAL_NODE=1: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler
// (hack/build-control-plane.sh), containerd, kubelet and kube-proxy
// (hack/build-node.sh), runc and the CNI plugins from Debian (hack/node.sh
// installs them). The command test/node/cmd/node is its command line;
// hack/node.sh builds and runs it. It is test code: nothing under cmd/ or
// pkg/ imports it (.golangci.yml's depguard rule).
//
// Files:
//
//	config.go      Config: paths, ports, names; from hack/node.sh's environment
//	components.go  each component's configuration as typed objects (the
//	               kubelet's KubeletConfiguration, kube-proxy's
//	               KubeProxyConfiguration, containerd's TOML, the CNI
//	               network) and command line
//	pki.go         the CA, serving and client certificates, service account
//	               keys, kubeconfigs
//	proc.go        /proc/<pid>/stat, pidfds
//	daemon.go      a daemon: started in a session of its own, stopped by its
//	               process group
//	state.go       what the node started and how the host was, between the
//	               command's runs (state.json)
//	host.go        Snapshot: what the node may change on the host; Take, Diff
//	node.go        Node: Up, Join, CheckClean, the daemons' bookkeeping
//	up.go          the control plane, containerd, the kubelet, kube-proxy
//	down.go        Down: drain, stop, and put the host back
//	restore.go     what Down removes and how it recognises it as the node's
//
// Host hygiene. Every path is the node's own: Config.Root (PKI, etcd, the
// kubelet's root directory, containerd's root, CNI and CDI configuration,
// simulated device nodes) and Config.Run (sockets, containerd's state,
// runc's state, shim sockets, network namespaces). Pods' cgroups live under
// /drasched-node, the pod network is the bridge drasched0. Down puts the
// host back as the snapshot that Up took found it: processes, mounts,
// cgroups, links, netfilter tables and chains, the sysctls the kubelet,
// kube-proxy and the bridge plugin change (kernel.panic,
// kernel.panic_on_oops, vm.overcommit_memory, ...), and the well-known
// paths that components create whatever their configuration says
// (/var/lib/cni, /var/log/containers); CheckClean compares.
//
// Every daemon runs in a session of its own. The state records each
// daemon's PID with its start time, which tells it from a later process
// given the same PID, and every session the node started: what is left in
// those after Down is the node's, whatever binary it runs, and nothing
// else counts as the node's (a kwok cluster beside it runs the same
// kube-apiserver and etcd binaries in sessions of its own). Signals go
// through pidfds, so that none reaches a process that took over a PID.
package harness
