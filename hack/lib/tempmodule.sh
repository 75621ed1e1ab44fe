# Temporary modules for upstream's test code (hack/conformance.sh,
# hack/conformance-integration.sh): upstream's packages are copied out of
# the module cache into a module outside this repository, which requires
# this repository and uses exactly its dependency versions. Source it from
# the repository root.

# write_temp_module DIR MODULE: writes DIR/go.mod and DIR/go.sum for MODULE,
# requiring this repository (replaced by REPO, the repository root) and
# every requirement and replace of its go.mod. Its tool block (the
# control-plane commands of hack/build-control-plane.sh) is left out.
write_temp_module() {
  local dir=$1 module=$2
  {
    echo "module ${module}"
    echo
    sed -n '/^go /p' go.mod
    echo
    echo "require github.com/drasched/drasched v0.0.0"
    echo "replace github.com/drasched/drasched => ${repo}"
    sed '/^tool (/,/^)/d' go.mod | sed -n '/^require\|^replace\|^\t\|^)/p'
  } >"${dir}/go.mod"
  cp go.sum "${dir}/go.sum"
}
