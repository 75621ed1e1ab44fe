// Package gpu is the node-side GPU DRA driver: discovery backends
// (nvidia-smi, sysfs, inventory file), ResourceSlice building,
// Prepare/Unprepare with a checkpoint and CDI specs, and health reporting.
package gpu
