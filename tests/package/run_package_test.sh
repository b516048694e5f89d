#!/usr/bin/env bash
# Installs a libpm build tree into a temporary prefix and uses it as another project would.
#
#   tests/package/run_package_test.sh BUILD_DIR [STEP...]
#
# Steps (default: all of them, in this order):
#   layout          what is installed where; no build or source path in any installed text file
#                   or RPATH; the installed pmrun runs 2 ranks (finding the installed pmd with
#                   no PM_AGENT), and pmsim simulates a failing rank
#   cmake           the C++ consumer (cxx_consumer/) configured with find_package(libpm CONFIG)
#                   against CMAKE_PREFIX_PATH=prefix, built, run; its C target through libpm::c
#   pkgconfig-c     the C consumer (c_consumer/main.c) built with a plain
#                   `cc $(pkg-config --cflags --libs libpm-c)` command line, run
#   pkgconfig-cxx   the C++ consumer built with `c++ $(pkg-config --cflags --libs libpm-sim)`, run
#
# The prefix is installed as <tmp>/stage and then moved to <tmp>/prefix before it is used, so
# every step also proves that the installed package is relocatable. The temporary directory is
# removed on exit, also on failure (PM_PACKAGE_KEEP=1 keeps it and prints where it is).
# CC, CXX, CFLAGS, CXXFLAGS and LDFLAGS are honoured (ctest passes the build's compilers and
# sanitizer flags). Exit codes: 0 passed, 1 failed, 77 skipped (libpm-c was not installed, for
# pkgconfig-c; ctest's SKIP_RETURN_CODE).
set -euo pipefail

usage() { sed -n '2,22p' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
build=$(cd "$1" && pwd)
shift
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(layout cmake pkgconfig-c pkgconfig-cxx)
src=$(cd "$(dirname "$0")/../.." && pwd)
here="$src/tests/package"
CC=${CC:-cc}
CXX=${CXX:-c++}
read -r -a cflags <<<"${CFLAGS:-}"
read -r -a cxxflags <<<"${CXXFLAGS:-}"
read -r -a ldflags <<<"${LDFLAGS:-}"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/libpm-package.XXXXXX")
cleanup() {
  if [ "${PM_PACKAGE_KEEP:-0}" = 1 ]; then
    echo "kept $tmp" >&2
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

# Nothing of libpm on PATH and no PM_AGENT: what is found, is found from the installed files.
clean_env=(env -u PM_AGENT -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH PATH=/usr/local/bin:/usr/bin:/bin)

step "install $build into a temporary prefix"
cmake --install "$build" --prefix "$tmp/stage" >"$tmp/install.log" || {
  cat "$tmp/install.log" >&2
  fail "cmake --install"
}
mv "$tmp/stage" "$tmp/prefix"
prefix="$tmp/prefix"

# The library directory: lib, lib64 or lib/<multiarch> (GNUInstallDirs decides).
config=$(find "$prefix" -name libpmConfig.cmake -path '*/cmake/libpm/*' | head -n 1)
[ -n "$config" ] || fail "no libpmConfig.cmake under $prefix"
libdir=$(cd "$(dirname "$config")/../.." && pwd)
pcdir="$libdir/pkgconfig"
version=$(sed -n 's/^#define PM_VERSION_STRING "\(.*\)"/\1/p' "$prefix/include/pm/version.hpp")
[ -n "$version" ] || fail "no PM_VERSION_STRING in the installed pm/version.hpp"
echo "prefix $prefix, libdir ${libdir#"$prefix"/}, version $version"

step_layout() {
  step "layout"
  local f
  for f in bin/pmrun bin/pmd bin/pmd-helper bin/pmsim include/pm/version.hpp include/pm/launcher.hpp \
           include/pm/sim/world.hpp; do
    [ -e "$prefix/$f" ] || fail "$f is not installed"
  done
  for f in libpm.a libpm_sim.a cmake/libpm/libpmConfig.cmake cmake/libpm/libpmConfigVersion.cmake \
           cmake/libpm/libpmTargets.cmake pkgconfig/libpm.pc pkgconfig/libpm-sim.pc; do
    [ -e "$libdir/$f" ] || fail "${libdir#"$prefix"/}/$f is not installed"
  done
  if [ -e "$pcdir/libpm-c.pc" ]; then
    [ -e "$prefix/include/pm/pm.h" ] || fail "include/pm/pm.h is not installed"
    local so
    so=$(readlink "$libdir/libpm-c.so") || fail "libpm-c.so is not a link to the versioned library"
    case "$so" in libpm-c.so.[0-9]*) ;; *) fail "libpm-c.so points to '$so'" ;; esac
    [ -e "$libdir/$so" ] || fail "libpm-c.so points to a missing $so"
    # Into a variable first: with pipefail, grep -q leaving early can SIGPIPE objdump.
    local headers
    headers=$(objdump -p "$libdir/libpm-c.so")
    grep -q 'SONAME *libpm-c\.so\.[0-9]' <<<"$headers" || fail "libpm-c.so has no versioned SONAME"
  else
    echo "(libpm-c is not installed)"
  fi
  # Relocatable: no path of the build, the sources or the staging prefix in a text file, and no
  # RPATH/RUNPATH pointing into them.
  # A path counts where it begins a word, so that a short source path such as /src does not match
  # "libpm/src/" in the installed docs.
  local hits path re=""
  for path in "$build" "$src" "$tmp/stage"; do
    re+="${re:+|}$(sed 's/[][\\.*^$+?(){}|]/\\&/g' <<<"$path")"
  done
  hits=$(grep -rIlE "(^|[^[:alnum:]_./-])($re)(/|[^[:alnum:]_.-]|$)" "$prefix" || true)
  [ -z "$hits" ] || fail "absolute build paths in: $hits"
  local elf
  while IFS= read -r elf; do
    local paths
    paths=$(objdump -p "$elf" 2>/dev/null | grep -E 'R(UN)?PATH' || true)
    if grep -q -e "$build" -e "$src" <<<"$paths"; then
      fail "$elf has an RPATH into the build tree"
    fi
  done < <(find "$prefix/bin" "$libdir" -maxdepth 1 -type f)

  # The installed launcher finds the installed agent (bin/pmd next to it) by itself.
  local out
  out=$("${clean_env[@]}" "$prefix/bin/pmrun" --allow-run-as-root -np 2 /bin/echo hi) ||
    fail "installed pmrun -np 2 /bin/echo hi exited $?"
  [ "$out" = $'hi\nhi' ] || fail "installed pmrun printed '$out'"
  local code=0
  "${clean_env[@]}" "$prefix/bin/pmrun" --allow-run-as-root -np 2 /bin/sh -c 'exit 3' \
    2>"$tmp/pmrun.err" || code=$?
  [ "$code" = 3 ] || { cat "$tmp/pmrun.err" >&2; fail "installed pmrun: a rank's exit 3 gave $code"; }
  echo "pmrun: 2 ranks said hi; a rank's exit 3 became pmrun's exit code"

  out=$("${clean_env[@]}" "$prefix/bin/pmsim" --hosts 4 --slots 2 --rank 5=exit:7@1s --seed 42) ||
    fail "installed pmsim exited $?: $out"
  grep -q "rank 5 on node2 exited with code 7" <<<"$out" || fail "pmsim printed: $out"
  echo "pmsim: $(grep -m1 'rank 5 on node2' <<<"$out")"
}

step_cmake() {
  step "cmake: find_package(libpm CONFIG) from CMAKE_PREFIX_PATH"
  cmake -S "$here/cxx_consumer" -B "$tmp/cxx" -DCMAKE_PREFIX_PATH="$prefix" \
    -DPM_EXPECT_VERSION="$version" -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
    >"$tmp/cxx-configure.log" 2>&1 || { cat "$tmp/cxx-configure.log" >&2; fail "configure"; }
  grep -E "libpm .* (from|refuses)" "$tmp/cxx-configure.log" | sed 's/^-- //'
  cmake --build "$tmp/cxx" -j2 >"$tmp/cxx-build.log" 2>&1 ||
    { cat "$tmp/cxx-build.log" >&2; fail "build"; }
  "${clean_env[@]}" "$tmp/cxx/cxx_consumer" || fail "cxx_consumer (CMake) exited $?"
  if [ -e "$tmp/cxx/c_consumer_cmake" ]; then
    "${clean_env[@]}" "$tmp/cxx/c_consumer_cmake" || fail "c_consumer (CMake, libpm::c) exited $?"
  elif [ -e "$pcdir/libpm-c.pc" ]; then
    fail "libpm-c is installed but the package has no libpm::c"
  fi
}

pkg_config() { PKG_CONFIG_PATH="$pcdir" pkg-config "$@"; }

step_pkgconfig_c() {
  step "pkg-config: cc \$(pkg-config --cflags --libs libpm-c)"
  if [ ! -e "$pcdir/libpm-c.pc" ]; then
    echo "SKIP: libpm-c is not installed (no libpm-c.pc in $pcdir)"
    exit 77
  fi
  command -v pkg-config >/dev/null || fail "pkg-config is not installed"
  [ "$(pkg_config --modversion libpm-c)" = "$version" ] || fail "libpm-c.pc's version"
  local pc
  read -r -a pc <<<"$(pkg_config --cflags --libs libpm-c)"
  # <pm/pm.h> is also a C++ header (extern "C").
  printf '#include <pm/pm.h>\nint main() { return pm_version() == 0; }\n' >"$tmp/pm_h.cpp"
  "$CXX" -std=c++20 -Wall -Wextra -Wpedantic -Werror "${cxxflags[@]}" -fsyntax-only \
    "$tmp/pm_h.cpp" "${pc[@]}" || fail "<pm/pm.h> does not compile as C++"
  echo "$CC -std=c11 main.c ${pc[*]}"
  "$CC" -std=c11 -Wall -Wextra -Wpedantic -Werror "${cflags[@]}" "$here/c_consumer/main.c" \
    -o "$tmp/c_consumer" "${pc[@]}" "${ldflags[@]}"
  # The shared library is found through pkg-config's libdir.
  "${clean_env[@]}" LD_LIBRARY_PATH="$(pkg_config --variable=libdir libpm-c)" "$tmp/c_consumer" ||
    fail "c_consumer (pkg-config) exited $?"
}

step_pkgconfig_cxx() {
  step "pkg-config: c++ \$(pkg-config --cflags --libs libpm-sim)"
  command -v pkg-config >/dev/null || fail "pkg-config is not installed"
  [ "$(pkg_config --modversion libpm-sim)" = "$version" ] || fail "libpm-sim.pc's version"
  local pc
  read -r -a pc <<<"$(pkg_config --cflags --libs libpm-sim)"
  # Every installed header compiles on its own (includes only what is installed, warns nothing).
  local h
  while IFS= read -r h; do
    printf '#include <%s>\n' "${h#"$prefix/include/"}" >"$tmp/header.cpp"
    "$CXX" -std=c++20 -Wall -Wextra -Wpedantic -Werror "${cxxflags[@]}" "${pc[@]}" -fsyntax-only \
      "$tmp/header.cpp" || fail "<${h#"$prefix/include/"}> does not compile on its own"
  done < <(find "$prefix/include/pm" -name '*.hpp' | sort)
  echo "every installed <pm/*.hpp> compiles on its own"
  echo "$CXX -std=c++20 main.cpp ${pc[*]}"
  "$CXX" -std=c++20 -Wall -Wextra -Wpedantic -Werror "${cxxflags[@]}" \
    "$here/cxx_consumer/main.cpp" -o "$tmp/cxx_consumer" "${pc[@]}" "${ldflags[@]}"
  "${clean_env[@]}" "$tmp/cxx_consumer" || fail "cxx_consumer (pkg-config) exited $?"
}

for s in "${steps[@]}"; do
  case "$s" in
    layout) step_layout ;;
    cmake) step_cmake ;;
    pkgconfig-c) step_pkgconfig_c ;;
    pkgconfig-cxx) step_pkgconfig_cxx ;;
    *) usage ;;
  esac
done
echo "PASS: ${steps[*]}"
