#!/usr/bin/env bash
# MariaDB 10.11 from Debian bookworm's packages, for the KFP API server's database in make test-kfp, unpacked
# (apt-get download + dpkg -x: nothing is installed, no service is started or enabled) once into
# ${XDG_CACHE_HOME:-~/.cache}/tfk8s/kfp/mariadb/ and that directory printed (last line); tests/realnode/kfp_fixtures.py
# runs its mariadbd as a host process on the node's address, with its libraries from there (LD_LIBRARY_PATH).
# Why MariaDB: KFP 2.17.0's API server on PostgreSQL 15 (DBDRIVERNAME=pgx) dies at its first start, 'Failed to
# create default experiment ... column "defaultexperimentid" does not exist' (gorm creates the column quoted,
# "DefaultExperimentId"; the store's squirrel query names it unquoted, which PostgreSQL folds to lower case);
# MySQL 8 is not in bookworm, MariaDB 10.11 speaks its dialect. Exit 3 (one line) when apt-get cannot get them.
set -euo pipefail
dir="${XDG_CACHE_HOME:-$HOME/.cache}/tfk8s/kfp/mariadb"
if [[ -x "$dir/usr/sbin/mariadbd" && -x "$dir/usr/bin/mariadb-install-db" && -x "$dir/usr/bin/my_print_defaults" ]]; then
  echo "$dir"; exit 0
fi
pkgs=(mariadb-server-core mariadb-client-core mariadb-common libaio1 liburing2 libnuma1)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
(cd "$tmp" && apt-get download "${pkgs[@]}" >/dev/null 2>&1) || {
  (apt-get update -qq >/dev/null 2>&1 && cd "$tmp" && apt-get download "${pkgs[@]}" >/dev/null 2>&1) || {
    echo "hack/kfp/mariadb.sh: apt-get could not download ${pkgs[*]} (Debian bookworm's)" >&2; exit 3; }; }
rm -rf "$dir.new"
for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$dir.new"; done
rm -rf "$dir"; mv "$dir.new" "$dir"
echo "$dir"
