#!/usr/bin/env bash
# The script ships inside the package (fence/_scripts/postgres.sh), so that an
# installed fence can start its own cluster; this path stays for the checkout's
# CI (.ci/run), conftest.py and docs/how-to/backends.md.
exec bash "$(dirname "$0")/../fence/_scripts/postgres.sh" "$@"
