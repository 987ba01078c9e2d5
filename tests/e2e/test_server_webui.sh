#!/usr/bin/env bash
# test_server_webui.sh - the web chat of `tern serve` (embedded model; docs/server.md "GET /"):
#   - GET / and /webui/<file> serve the embedded files: the page loads nothing external and
#     has no inline script (its Content-Security-Policy allows none), marked and highlight.js
#     are Debian's files byte for byte, an ETag revalidates to 304, an unknown file is a 404;
#   - in headless Chromium (Debian's chromium + chromium-driver + python3-selenium; skipped
#     loudly when absent), every wait on a DOM state (WebDriverWait) or a server state:
#       settings start from /props (the serve flags --top-k 33 --repeat-penalty 1 show), a
#       changed one survives a reload and Reset brings the server's back;
#       markdown renders live (a grammar in the "extra request fields" makes the model's reply
#       a fixed markdown text): heading, bold, a highlighted code block; tokens/s shown; HTML
#       in the model's text is shown as text, never run;
#       regenerate replaces the reply, edit replaces the question and the reply after it;
#       the system prompt is sent (more prompt tokens), kept per conversation, carried to a new one;
#       copy puts the reply on the clipboard;
#       a conversation survives a reload; the list: new, switch, delete;
#       the thinking box on: the reasoning streams into its section (open only until the
#       answer starts);
#       a stored reply with thinking: the thinking section is folded and unfolds; script,
#       images and javascript: links in stored text stay inert;
#       Stop ends a long reply mid-way: the reply is marked stopped, stops growing, and the
#       server's slot is idle again (/slots) long before max_tokens would have been reached.
#   A screenshot is kept in $TERN_ARTIFACTS (default build/artifacts).
# Usage: bash test_server_webui.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_server_webui.sh /path/to/tern}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
MODEL="$SRC/models/tern-default.gguf"
if [ ! -f "$MODEL" ]; then echo "*** SKIPPED: $MODEL missing ***"; exit 77; fi
unset TERN_MODEL
TMP=$(mktemp -d)
SPID=
cleanup() { [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
# --repeat-penalty 1: with the embedded model's own defaults (general.sampling.*: repeat
# penalty 1.3) its greedy story ends in ~60 tokens, before Stop can be pressed; without
# that penalty it runs to max_tokens, so the Stop check has a reply to stop.
# --top-k 33: a value neither the model's keys (40) nor the built-in default (20) give, so
# the page showing it proves its settings come from /props
"$TERN" serve --port 0 --threads 2 --parallel 1 --ctx 2048 --quiet --repeat-penalty 1 --top-k 33 >"$TMP/out" 2>"$TMP/err" &
SPID=$!
for _ in $(seq 1 1200); do grep -q "listening on" "$TMP/out" 2>/dev/null && break; sleep 0.05; done
URL=$(grep -o 'http://[^ ]*' "$TMP/out") || { echo "FAIL server did not start"; cat "$TMP/err"; exit 1; }
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
page=$(curl -s -D "$TMP/h" "$URL/") || { echo "FAIL GET /"; exit 1; }
grep -qi "^content-type: text/html" "$TMP/h" && grep -q "<title>tern chat</title>" <<<"$page" \
  && ok "GET / serves the page" || bad "GET / is not the page"
if grep -qE "(src|href)=\"https?://" <<<"$page"; then bad "the page loads something external"
else ok "the page loads nothing external"; fi
if grep -qE "<script>|<script [^>]*>[^<]" <<<"$page"; then bad "the page has an inline script"
else ok "the page has no inline script"; fi
grep -qi "^content-security-policy: .*script-src 'self'" "$TMP/h" && ok "the page has a Content-Security-Policy" \
  || bad "no Content-Security-Policy with script-src 'self' on the page"
markdown=1
for f in chat.js:javascript chat.css:css marked.min.js:javascript highlight.min.js:javascript highlight.css:css; do
  name=${f%%:*} type=${f##*:}
  code=$(curl -s -o "$TMP/$name" -D "$TMP/h_$name" -w "%{http_code}" "$URL/webui/$name")
  [ "$code" = 200 ] && grep -qi "^content-type: text/$type" "$TMP/h_$name" && ok "GET /webui/$name: 200 text/$type" \
    || bad "GET /webui/$name: $code $(grep -i content-type "$TMP/h_$name")"
done
for f in marked.min.js:/usr/share/javascript/marked/marked.min.js highlight.min.js:/usr/share/javascript/highlight.js/highlight.min.js; do
  name=${f%%:*} sys=${f#*:}
  if head -c 40 "$TMP/$name" | grep -q "tern was built without"; then
    echo "*** SKIPPED markdown checks: this tern was built without $sys (libjs-marked / libjs-highlight.js) ***"
    markdown=0
  elif [ -f "$sys" ]; then
    cmp -s "$TMP/$name" "$sys" && ok "/webui/$name is $sys" || bad "/webui/$name differs from $sys"
  fi
done
etag=$(grep -i "^etag:" "$TMP/h_chat.js" | cut -d' ' -f2 | tr -d '\r')
code=$(curl -s -o /dev/null -w "%{http_code}" -H "If-None-Match: $etag" "$URL/webui/chat.js")
[ -n "$etag" ] && [ "$code" = 304 ] && ok "an unchanged file revalidates to 304" || bad "If-None-Match $etag: $code"
code=$(curl -s -o /dev/null -w "%{http_code}" "$URL/webui/nothing.js")
[ "$code" = 404 ] && ok "an unknown /webui/ file is a 404" || bad "/webui/nothing.js: $code"

PY=/usr/bin/python3
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null || ! $PY -c "import selenium" 2>/dev/null; then
  echo "*** SKIPPED browser part: needs chromium, chromium-driver and python3-selenium (Debian) ***"
  [ $fail = 0 ] && exit 77
  exit $fail
fi
ART=${TERN_ARTIFACTS:-$SRC/build/artifacts}
mkdir -p "$ART"
timeout 400 $PY "$SRC/tests/e2e/webui_browser.py" "$URL" "$ART" "$markdown" || fail=1
exit $fail
