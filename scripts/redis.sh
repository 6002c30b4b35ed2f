#!/usr/bin/env bash
# The script ships inside the package (fence/_scripts/redis.sh), so that an
# installed fence can start its own server; this path stays for the checkout's
# CI (.ci/run), conftest.py and docs/how-to/check-a-queue.md.
exec bash "$(dirname "$0")/../fence/_scripts/redis.sh" "$@"
