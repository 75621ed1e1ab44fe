#!/usr/bin/env bash
# Prints the path of a tar of the files of Debian's libc6 package for an
# architecture, the GNU C library that `make images` puts below the GPU
# plugin's binary (hack/images/libc.go says why) and hack/build-node.sh
# below the test workload's.
#
# The package is pinned by version and checksum in hack/images/libc6.sha256
# (sha256sum's format). The first run downloads it with apt-get (from the
# host's Debian or Ubuntu sources, which must carry that version) and
# unpacks it with dpkg-deb; later runs reuse the tar. Once Debian's mirrors
# have moved on to a newer version, a host with the pinned version
# installed takes the installed package's files (checked with dpkg
# --verify); elsewhere, or without apt-get, download the .deb from
# snapshot.debian.org and pass it as LIBC6_DEB: it is checked against the
# same checksum. To move to a newer version, replace the line in
# hack/images/libc6.sha256.
#
# Usage: hack/libc6.sh ARCH DIR     e.g. hack/libc6.sh amd64 _output/images/libc6
#   LIBC6_DEB  the package file to use instead of downloading it
set -euo pipefail

if (($# != 2)); then
  echo "usage: $0 ARCH DIR" >&2
  exit 2
fi
arch=$1
dir=$2
cd "$(dirname "$0")/.."
pins=hack/images/libc6.sha256

line=$(grep -E "  libc6_[^_]+_${arch}\.deb\$" "${pins}" || true)
if [[ -z "${line}" ]]; then
  echo "${pins} pins no libc6 for ${arch}: add the checksum of libc6_<version>_${arch}.deb" >&2
  exit 1
fi
deb_name=${line##* }
tar_path="${dir}/${deb_name%.deb}.tar"
if [[ -f "${tar_path}" ]]; then
  echo "${tar_path}"
  exit 0
fi

mkdir -p "${dir}"
work=$(mktemp -d "${dir}/.libc6.XXXXXX")
trap 'rm -rf "${work}"' EXIT
version=${deb_name#libc6_}
version=${version%_"${arch}".deb}

# installed_files writes a tar of the files of the installed libc6 when it
# is the pinned version and dpkg finds every file as the package installed
# it: what the package holds, without its .deb.
installed_files() {
  local installed files
  installed=$(dpkg-query -W -f '${Version}' "libc6:${arch}" 2>/dev/null) || return 1
  [[ "${installed}" == "${version}" ]] || return 1
  if [[ -n "$(dpkg --verify "libc6:${arch}" 2>&1)" ]]; then
    echo "the installed libc6:${arch} differs from its package (dpkg --verify libc6:${arch})" >&2
    return 1
  fi
  files=$(dpkg-query -L "libc6:${arch}" | while read -r f; do
    [[ -f "${f}" || -L "${f}" ]] && [[ ! -d "${f}" ]] && echo "${f#/}"
  done)
  tar -cf "$1" --no-recursion -C / -T - <<<"${files}"
}

if [[ -n "${LIBC6_DEB:-}" ]]; then
  cp "${LIBC6_DEB}" "${work}/${deb_name}"
elif ! command -v apt-get >/dev/null; then
  echo "apt-get not found: download ${deb_name} (snapshot.debian.org) and pass LIBC6_DEB=<file>" >&2
  exit 1
# As root, apt would fetch as its own user, who cannot write here.
elif ! (cd "${work}" && apt-get download -qq -o APT::Sandbox::User=root "libc6:${arch}=${version}" >&2); then
  # Debian's mirrors keep only a suite's newest version: once they have
  # moved on, a host that has the pinned version installed still builds.
  if installed_files "${work}/files.tar"; then
    echo "libc6 ${version}: not on the mirrors any more, taking the installed package's files (dpkg --verify: unchanged)" >&2
    mv "${work}/files.tar" "${tar_path}"
    echo "${tar_path}"
    exit 0
  fi
  echo "libc6 ${version} is neither on the mirrors nor installed: download ${deb_name} (snapshot.debian.org) and pass LIBC6_DEB=<file>, or pin a newer version in ${pins}" >&2
  exit 1
fi
(cd "${work}" && echo "${line}" | sha256sum --check --quiet --strict -) >&2
dpkg-deb --fsys-tarfile "${work}/${deb_name}" >"${work}/files.tar"
mv "${work}/files.tar" "${tar_path}"
echo "${tar_path}"
