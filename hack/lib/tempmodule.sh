# shellcheck shell=bash disable=SC2154 # root is hack/lib/init.sh's
# Temporary modules for upstream's test code (hack/conformance.sh,
# hack/conformance-integration.sh): upstream's packages are copied out of
# the module cache into a module outside this repository, which requires
# this repository and uses exactly its dependency versions. Source it after
# hack/lib/init.sh.

# write_temp_module DIR MODULE: writes DIR/go.mod and DIR/go.sum for MODULE,
# requiring this repository (replaced by root, the repository root) and
# every requirement and replace of its go.mod. Its tool block (the
# control-plane commands of hack/build-control-plane.sh) is left out.
write_temp_module() {
  local dir=$1 module=$2
  {
    echo "module ${module}"
    echo
    sed -n '/^go /p' "${root}/go.mod"
    echo
    echo "require github.com/drasched/drasched v0.0.0"
    echo "replace github.com/drasched/drasched => ${root}"
    sed '/^tool (/,/^)/d' "${root}/go.mod" | sed -n '/^require\|^replace\|^\t\|^)/p'
  } >"${dir}/go.mod"
  cp "${root}/go.sum" "${dir}/go.sum"
}
