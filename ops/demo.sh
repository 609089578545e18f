#!/usr/bin/env bash
# Drive a running compactd with curl as an agent would: append a real transcript one turn per
# request, fetch the prompt, and wait for the worker to publish a compacted snapshot (epoch >= 1).
#
#   make up                       # in another terminal; note the API key it prints
#   ops/demo.sh cpd_... [TRANSCRIPT] [CONTEXT_WINDOW]
#
# COMPACTD_URL (default http://127.0.0.1:8700) and SESSION (default demo-<time>) can be set.
set -euo pipefail
key=${1:?usage: ops/demo.sh API_KEY [TRANSCRIPT] [CONTEXT_WINDOW]}
file=$(realpath "${2:-$(dirname "$0")/../../shared/data/transcripts/claude-code/spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl}")
cd "$(dirname "$0")/.."
window=${3:-100000}
url=${COMPACTD_URL:-http://127.0.0.1:8700}
sid=${SESSION:-demo-$(date +%s)}
py=${PYTHON:-.venv/bin/python}
command -v jq >/dev/null || { echo "demo: needs jq and curl" >&2; exit 1; }

# one append body per line: the transcript's messages, imported by compactd's own importers
bodies=$(mktemp)
trap 'rm -f "$bodies"' EXIT
"$py" - "$file" "$window" >"$bodies" <<'PY'
import sys, orjson
from worker.compaction.formats import load_transcript
t = load_transcript(sys.argv[1])
for i, m in enumerate(t.messages):
    body = {"messages": [m]}
    if i == 0:
        body |= {"system": t.system, "context_window": int(sys.argv[2])}
    print(orjson.dumps(body).decode())
PY

auth=(-H "Authorization: Bearer $key" -H 'Content-Type: application/json')
n=0
started=$(date +%s%N)
elapsed() { echo "$(( ($(date +%s%N) - started) / 1000000 )) ms"; }
while IFS= read -r body; do
  n=$((n + 1))
  # the body on stdin: a turn with a big tool output is over the kernel's limit for one argument
  printf '%s' "$body" | curl -sf "${auth[@]}" -H "Idempotency-Key: $sid-$n" --data-binary @- \
    "$url/v1/sessions/$sid/turns" >/dev/null || { echo "demo: append $n failed" >&2; exit 1; }
done <"$bodies"
echo "appended $n turns to session $sid in $(elapsed)"

prompt() { curl -sf "${auth[@]}" "$url/v1/sessions/$sid/prompt"; }
prompt | jq -c '{version, epoch, compacted_through, token_count, budget_tokens, messages: (.messages | length)}'
epoch=0
for _ in $(seq 120); do
  epoch=$(prompt | jq '.epoch // 0')
  [ "$epoch" -ge 1 ] && break
  sleep 0.5
done
if [ "$epoch" -lt 1 ]; then
  echo "demo: no snapshot published within 60 s (is the worker running? a short transcript under" >&2
  echo "      the window is never compacted: try a smaller CONTEXT_WINDOW)" >&2
  exit 1
fi
echo "after $(elapsed) from the first append:"
prompt | jq -c '{version, epoch, compacted_through, token_count, budget_tokens, messages: (.messages | length)}'
curl -sf "${auth[@]}" "$url/v1/sessions/$sid" | jq -c .
prompt | "$py" -c '
import sys, orjson
from worker.compaction.validate import request_problems
p = orjson.loads(sys.stdin.buffer.read())
problems = request_problems({"system": p["system"], "messages": p["messages"]})
print("valid Anthropic request" if not problems else f"INVALID: {problems}")
sys.exit(1 if problems else 0)'
