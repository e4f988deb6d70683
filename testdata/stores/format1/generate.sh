#!/usr/bin/env bash
# Writes bridge.db beside this script: the store that the bridge of commit
# ac5b9d5 (main before store formats were recorded: format 1) leaves after
# a console session (asks run, approved, cancelled, retried; one left
# waiting for approval, with its card and timer) and two API asks with an
# Idempotency-Key. cmd/bridge's TestMigrateFormat1Fixture migrates it.
#
#   bash testdata/stores/format1/generate.sh
set -euo pipefail
commit=ac5b9d5d84803e7be1590f2dc2df2840ffafcb84
here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; git -C "$repo" worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
pid=
git -C "$repo" worktree add --detach "$work/src" "$commit" >/dev/null
(cd "$work/src" && go build -o "$work/bridge" ./cmd/bridge)
mkdir "$work/run" && cd "$work/run"
mkfifo in
USER=alice "$work/bridge" run --http 127.0.0.1:0 <in >out.txt 2>err.txt &
pid=$!
exec 3>in
wait_for() { for _ in $(seq 100); do grep -q "$1" out.txt && return; sleep 0.1; done; echo "timed out waiting for $1"; cat out.txt err.txt; exit 1; }
say() { echo "$1" >&3; }
say '@coder say looking; progress 50 halfway; tool build 1s; echo all good'; wait_for 'final: all good'
say '/as bob'; say '@reviewer check R-01'; wait_for 'R.*-02'
say '/as'; say 'approve R-02'; wait_for '02 | status: done'
say '@coder sleep 1m; echo slept'; wait_for '03 | status: running'
say 'cancel R-03'; wait_for '03 | status: cancelled'
say 'retry R-01'; wait_for '04 | status: done'
say '/as carol'; say '@coder echo waits for approval'; wait_for 'R.*-05'
say '/as'
api=$(cat .roombridge/http.addr); tok=$(cat .roombridge/api.token)
for k in key-1 key-1 key-2; do
  curl -sS --fail-with-body -H "Authorization: Bearer $tok" -H "Idempotency-Key: $k" -H 'Content-Type: application/json' \
    -d '{"room":"console","agent":"coder","text":"echo from the api"}' "http://$api/v1/requests" >/dev/null
done
wait_for '07 | status: done'
exec 3>&-
kill -TERM "$pid"; wait "$pid" || true; pid=
cp .roombridge/bridge.db "$here/bridge.db"
echo "wrote $here/bridge.db"
