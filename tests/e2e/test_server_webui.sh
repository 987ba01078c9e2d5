#!/usr/bin/env bash
# test_server_webui.sh - the web chat page at / of `tern serve` (embedded model):
#   - GET / serves the embedded page (text/html, no external URL in it);
#   - in headless Chromium (Debian's chromium + chromium-driver + python3-selenium,
#     skipped when absent): type a message, see a streamed reply appear; send a
#     long one and press Stop mid-way (the reply is marked stopped, the slot is
#     freed); a screenshot is kept in $TERN_ARTIFACTS (default build/artifacts).
# Usage: bash test_server_webui.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_server_webui.sh /path/to/tern}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
MODEL="$SRC/models/tern-default.gguf"
if [ ! -f "$MODEL" ]; then echo "*** SKIPPED: $MODEL missing ***"; exit 0; fi
unset TERN_MODEL
TMP=$(mktemp -d)
SPID=
cleanup() { [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
# --repeat-penalty 1: with the embedded model's own defaults (general.sampling.*: repeat
# penalty 1.3) its greedy story ends in ~60 tokens, before Stop can be pressed; without
# that penalty it runs to max_tokens, so the Stop check has a reply to stop
"$TERN" serve --port 0 --threads 2 --parallel 1 --ctx 2048 --quiet --repeat-penalty 1 >"$TMP/out" 2>"$TMP/err" &
SPID=$!
for _ in $(seq 1 1200); do grep -q "listening on" "$TMP/out" 2>/dev/null && break; sleep 0.05; done
URL=$(grep -o 'http://[^ ]*' "$TMP/out") || { echo "FAIL server did not start"; cat "$TMP/err"; exit 1; }
fail=0
page=$(curl -s -D "$TMP/h" "$URL/") || { echo "FAIL GET /"; exit 1; }
grep -qi "^content-type: text/html" "$TMP/h" && grep -q "<title>tern chat</title>" <<<"$page" \
  && echo "ok   GET / serves the page" || { echo "FAIL GET / is not the page"; fail=1; }
if grep -qE "(src|href)=\"https?://" <<<"$page"; then echo "FAIL the page loads something external"; fail=1
else echo "ok   the page loads nothing external"; fi

PY=/usr/bin/python3
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null || ! $PY -c "import selenium" 2>/dev/null; then
  echo "*** SKIPPED browser part: needs chromium, chromium-driver and python3-selenium (Debian) ***"
  exit $fail
fi
ART=${TERN_ARTIFACTS:-$SRC/build/artifacts}
mkdir -p "$ART"
timeout 150 $PY - "$URL" "$ART" <<'PY' || fail=1
import sys, time, json, urllib.request
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
url, art = sys.argv[1], sys.argv[2]
fails = 0
def check(name, cond, info=""):
    global fails
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else f"  [{info}]"), flush=True)
    if not cond: fails += 1
o = webdriver.ChromeOptions()
for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]: o.add_argument(a)
o.binary_location = "/usr/bin/chromium"
d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)
try:
    d.set_page_load_timeout(30)
    d.get(url + "/")
    def set_val(id_, v):
        e = d.find_element(By.ID, id_); e.clear(); e.send_keys(str(v))
    set_val("max_tokens", 24); set_val("temp", 0)
    d.find_element(By.ID, "input").send_keys("Hello there")
    d.find_element(By.ID, "send").click()
    t0 = time.time(); done = False
    while time.time() - t0 < 60:
        msgs = d.find_elements(By.CSS_SELECTOR, ".msg.assistant")
        if msgs and msgs[-1].get_attribute("data-done"): done = True; break
        time.sleep(0.2)
    text = msgs[-1].find_element(By.CSS_SELECTOR, ".content").text if msgs else ""
    check("a message gets a streamed reply", done and len(text) > 0 and not d.find_elements(By.CSS_SELECTOR, ".error"), text)
    # a long reply, stopped mid-way
    set_val("max_tokens", 4000)
    d.find_element(By.ID, "input").send_keys("Tell me a long story")
    d.find_element(By.ID, "send").click()
    t0 = time.time(); seen = ""
    while time.time() - t0 < 30:
        msgs = d.find_elements(By.CSS_SELECTOR, ".msg.assistant")
        seen = msgs[-1].find_element(By.CSS_SELECTOR, ".content").text if len(msgs) >= 2 else ""
        if len(seen) > 20: break
        time.sleep(0.1)
    d.find_element(By.ID, "stop").click()
    time.sleep(1.0)
    msgs = d.find_elements(By.CSS_SELECTOR, ".msg.assistant")
    check("Stop ends the reply mid-way", len(msgs) == 2 and msgs[-1].get_attribute("data-stopped") == "1", seen)
    h = {}
    for _ in range(30):
        h = json.load(urllib.request.urlopen(url + "/health", timeout=5))
        if h["slots_busy"] == 0: break
        time.sleep(0.2)
    check("the stopped request freed its slot", h.get("slots_busy") == 0, h)
    check("the conversation is kept in the page", len(d.find_elements(By.CSS_SELECTOR, ".msg.user")) == 2)
    d.save_screenshot(f"{art}/webui.png")
    print(f"screenshot: {art}/webui.png")
finally:
    d.quit()
sys.exit(1 if fails else 0)
PY
exit $fail
