#!/bin/sh
# Fails when a tracked C source differs from what .clang-format asks for.
set -eu
cd "$(dirname "$0")/.."
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find proto rpc daemon backends tests -name '*.[ch]')
# shellcheck disable=SC2086
clang-format --dry-run -Werror $files
echo "format: $(echo "$files" | wc -w) files clean"
