# shellcheck shell=bash disable=SC2154 # root is hack/lib/init.sh's
# Temporary modules for upstream's test code (hack/conformance.sh,
# hack/conformance-integration.sh): upstream's packages are copied out of
# the module cache into a module outside this repository, which requires
# this repository and uses exactly its dependency versions (those of the
# minor that hack/lib/minor.sh selects). Source it after hack/lib/init.sh
# (it sources hack/lib/minor.sh).

# The module file of the minor that KUBE_MINOR selects (gomod).
# shellcheck source=hack/lib/minor.sh
source "${root}/hack/lib/minor.sh"

# write_temp_module DIR MODULE: writes DIR/go.mod and DIR/go.sum for MODULE,
# requiring this repository (replaced by root, the repository root) and
# every requirement and replace of its module file (gomod). Its tool block (the
# control-plane commands of hack/build-control-plane.sh) is left out.
write_temp_module() {
  local dir=$1 module=$2 repo=${root}
  if [[ "${gomod}" != "${root}/go.mod" ]]; then
    # An older minor: the go command reads a replaced module's requirements
    # from the go.mod in its directory, which names the newest minor. The
    # module is replaced by a copy of this repository's tree made of links,
    # with the minor's module file as its go.mod.
    repo=${dir}/.drasched
    mkdir -p "${repo}"
    local entry
    for entry in "${root}"/*; do
      ln -s "${entry}" "${repo}/${entry##*/}"
    done
    rm "${repo}/go.mod" "${repo}/go.sum"
    cp "${gomod}" "${repo}/go.mod"
    cp "${gomod%.mod}.sum" "${repo}/go.sum"
  fi
  {
    echo "module ${module}"
    echo
    sed -n '/^go /p' "${gomod}"
    echo
    echo "require github.com/drasched/drasched v0.0.0"
    echo "replace github.com/drasched/drasched => ${repo}"
    sed '/^tool (/,/^)/d' "${gomod}" | sed -n '/^require\|^replace\|^\t\|^)/p'
  } >"${dir}/go.mod"
  cp "${gomod%.mod}.sum" "${dir}/go.sum"
}
