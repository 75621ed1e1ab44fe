// Package node tests drasched on a real node: a kubelet, containerd and
// runc that hack/node.sh runs on this host, with the control plane of
// hack/build-control-plane.sh. The Helm chart installs drasched and the GPU
// driver from the images `make images` builds, as a user installs them;
// the GPUs are simulated (an inventory file and character devices the test
// creates under the node's device root), the containers are real: each
// workload's container prints the environment and the device nodes it
// sees (test/node/images/gpu-check), and the tests compare that with its
// claims' allocations.
//
// The tests carry the build tag "node": `make test-node` brings the node
// up, runs them with -tags node and puts the host back (hack/test-node.sh).
// docs/real-node.md says what they check and what still needs a GPU.
package node
