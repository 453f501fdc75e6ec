#!/bin/sh
# The layering rules of the source tree (docs/development.md, "Layout"), checked on every
# #include of every C file (TAP):
#   1. includes are spelled from the repository root ("daemon/core/log.h")
#   2. daemon/core/ includes nothing of the project outside daemon/core/
#   3. rpc/ and backends/ include nothing of daemon/ but daemon/core/, and no CSI protos
#   4. the node role never includes the controller role's headers, and the other way round
#   5. daemon/csi/ and daemon/metrics/ include neither role
#   6. daemon/kube/ (the API client) includes only daemon/core/
#   7. the webhooks role includes neither the node nor the controller role
# Each rule prints the offending file:line when it fails.
set -u
cd "$(dirname "$0")/../.."
incs=$(git ls-files '*.c' '*.h' 2>/dev/null | xargs grep -Hn '^#include "' | sed 's/:#include "\(.*\)".*/:\1/')
n=0
fail=0
check() { # description, offending lines
	n=$((n + 1))
	if [ -z "$2" ]; then
		echo "ok $n - $1"
	else
		echo "not ok $n - $1"
		echo "$2" | sed 's/^/# /'
		fail=1
	fi
}
# file:line:included
bad=$(echo "$incs" | awk -F: '$3 !~ /^(daemon|rpc|backends|proto|tests)\//')
check "every project include is spelled from the repository root" "$bad"
bad=$(echo "$incs" | awk -F: '$1 ~ /^daemon\/core\// && $3 !~ /^daemon\/core\//')
check "daemon/core/ includes only daemon/core/" "$bad"
bad=$(echo "$incs" | awk -F: '$1 ~ /^(rpc|backends)\// && (($3 ~ /^daemon\// && $3 !~ /^daemon\/core\//) || $3 ~ /^proto\//)')
check "rpc/ and backends/ include nothing of daemon/ but daemon/core/, and no protos" "$bad"
bad=$(echo "$incs" | awk -F: '($1 ~ /^daemon\/node\// && $3 ~ /^daemon\/controller\//) || ($1 ~ /^daemon\/controller\// && $3 ~ /^daemon\/node\//)')
check "the node and controller roles never include each other's headers" "$bad"
bad=$(echo "$incs" | awk -F: '$1 ~ /^daemon\/(csi|metrics)\// && $3 ~ /^daemon\/(node|controller)\//')
check "daemon/csi/ and daemon/metrics/ include neither role" "$bad"
bad=$(echo "$incs" | awk -F: '$1 ~ /^daemon\/kube\// && $3 !~ /^daemon\/(core|kube)\//')
check "daemon/kube/ includes only daemon/core/" "$bad"
bad=$(echo "$incs" | awk -F: '$1 ~ /^daemon\/webhooks\// && $3 ~ /^daemon\/(node|controller)\//')
check "the webhooks role includes neither the node nor the controller role" "$bad"
# The checks above must see the tree: an empty include list is a failure too.
check "the include list was read" "$([ -n "$incs" ] || echo 'no includes found (not a git checkout?)')"
echo "1..$n"
exit $fail
