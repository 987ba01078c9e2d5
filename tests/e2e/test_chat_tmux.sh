#!/usr/bin/env bash
# test_chat_tmux.sh - `tern chat` in a real terminal (tmux send-keys /
# capture-pane): the reply streams (the pane grows while it is generated),
# Ctrl-C stops it and the conversation is kept (/info shows the context still
# filled and growing on the next turn), /think, /reset, line editing history
# (Up recalls the last line), Ctrl-C at the prompt, /exit. Skips loudly when tmux is missing.
# Usage: bash test_chat_tmux.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_chat_tmux.sh /path/to/tern}
TERN=$(cd "$(dirname "$TERN")" && pwd)/$(basename "$TERN")
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
FIX=${TERN_FIXTURES:-${TERN_FIXTURES_DEFAULT:-$SRC/../shared/fixtures}}
if ! command -v tmux >/dev/null; then echo "*** SKIPPED: tmux is not installed (apt-get install tmux) ***"; exit 77; fi
if [ ! -d "$FIX/qwen35-tiny" ]; then echo "*** SKIPPED: fixtures missing ($FIX) ***"; exit 77; fi
MODEL="$FIX/qwen35-tiny/model-pq2_0.gguf"
S="tern-chat-test-$$"
TMP=$(mktemp -d)
cleanup() { tmux -L "tern-test-$$" kill-server 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; echo "---- pane:"; pane | grep -v "^$" | tail -15; echo "----"; }
pane() { tmux -L "tern-test-$$" capture-pane -p -t "$S" -S -200 2>/dev/null; }
# wait_for REGEX [seconds]: poll the pane
wait_for() { local t=${2:-30}; for _ in $(seq $((t * 10))); do pane | grep -qE "$1" && return 0; sleep 0.1; done; return 1; }
count() { pane | grep -cE "$1"; }

# seed 1 with these settings: the first reply runs >= 300 tokens without an end token
tmux -L "tern-test-$$" new-session -d -s "$S" -x 160 -y 50 \
  "TERN_HISTORY=$TMP/history '$TERN' chat -m '$MODEL' --seed 1 --temp 1 -n 0; echo CHAT-EXITED rc=\$?; sleep 30"
if wait_for '^>( |$)' 30; then ok "prompt appears"; else bad "prompt appears"; exit 1; fi

a0=$(pane | wc -c)
tmux -L "tern-test-$$" send-keys -t "$S" "Hello" Enter
# the reply has begun once the pane holds more than the echoed line; then it must keep
# growing while it is generated (polled: a sanitized build on a loaded machine can take
# seconds to evaluate the prompt)
a=""
for _ in $(seq 1 300); do n=$(pane | wc -c); [ "$n" -gt $((a0 + 8)) ] && { a=$n; break; }; sleep 0.1; done
b=${a:-0}
if [ -n "$a" ]; then
  for _ in $(seq 1 300); do sleep 0.1; b=$(pane | wc -c); [ "$b" -gt "$a" ] && break; done
fi
if [ -n "$a" ] && [ "$b" -gt "$a" ]; then ok "reply streams ($a -> $b bytes on screen)"; else bad "reply streams (${a:-no reply} -> $b bytes)"; fi
tmux -L "tern-test-$$" send-keys -t "$S" C-c
if wait_for '^\[stopped\]' 10; then ok "Ctrl-C stops the reply"; else bad "Ctrl-C stops the reply"; fi
if wait_for 'cancelled\]' 5; then ok "stop reason cancelled reported"; else bad "stop reason cancelled reported"; fi
sleep 0.3
tmux -L "tern-test-$$" send-keys -t "$S" "/info" Enter
if wait_for '^\[context: [1-9][0-9]* of' 10; then ok "conversation kept after Ctrl-C"; else bad "conversation kept after Ctrl-C"; fi
n1=$(pane | grep -oE '^\[context: [0-9]+' | tail -1 | grep -oE '[0-9]+$')

tmux -L "tern-test-$$" send-keys -t "$S" "/think off" Enter
if wait_for '^\[thinking off\]' 10; then ok "/think off"; else bad "/think off"; fi
tmux -L "tern-test-$$" send-keys -t "$S" "Second" Enter
sleep 1.5
tmux -L "tern-test-$$" send-keys -t "$S" C-c
wait_for '(cancelled|eog|context_full)\]' 20
sleep 0.3
tmux -L "tern-test-$$" send-keys -t "$S" "/info" Enter
for _ in $(seq 1 40); do  # the /info line of this turn (a loaded or sanitized run is slow)
  n2=$(pane | grep -oE '^\[context: [0-9]+' | tail -1 | grep -oE '[0-9]+$')
  [ -n "$n2" ] && [ -n "$n1" ] && [ "$n2" -gt "$n1" ] && break
  sleep 0.5
done
if [ -n "$n1" ] && [ -n "$n2" ] && [ "$n2" -gt "$n1" ]; then ok "second turn continues the conversation ($n1 -> $n2 tokens)"
else bad "second turn continues the conversation ($n1 -> $n2)"; fi
# the turn's prompt is only what the context grew by (a re-evaluated conversation would
# count the n1 earlier tokens again)
pt=$(pane | grep -oE '^\[[0-9]+ prompt tokens' | tail -1 | grep -oE '[0-9]+')
if [ -n "$pt" ] && [ -n "$n2" ] && [ -n "$n1" ] && [ "$pt" -le $((n2 - n1)) ]; then
  ok "second turn evaluates only the new tokens"; else bad "second turn evaluates only the new tokens"; fi

# history: Up recalls the previous line (libedit)
tmux -L "tern-test-$$" send-keys -t "$S" Up
sleep 0.5
if pane | grep -v '^$' | tail -1 | grep -q '^> /info'; then ok "Up recalls history"; else bad "Up recalls history"; fi
tmux -L "tern-test-$$" send-keys -t "$S" C-u
# Ctrl-C at the prompt drops the typed line and keeps the chat running
tmux -L "tern-test-$$" send-keys -t "$S" "half typed"
sleep 0.3
tmux -L "tern-test-$$" send-keys -t "$S" C-c
sleep 0.5
tmux -L "tern-test-$$" send-keys -t "$S" "/think on" Enter
if wait_for '^\[thinking on\]' 10 && ! pane | grep -q 'CHAT-EXITED'; then ok "Ctrl-C at the prompt drops the line, chat goes on"
else bad "Ctrl-C at the prompt drops the line, chat goes on"; fi
tmux -L "tern-test-$$" send-keys -t "$S" "/reset" Enter
if wait_for '^\[conversation cleared\]' 10; then ok "/reset"; else bad "/reset"; fi
tmux -L "tern-test-$$" send-keys -t "$S" "/info" Enter
if wait_for '^\[context: 0 of' 10; then ok "/reset empties the context"; else bad "/reset empties the context"; fi
tmux -L "tern-test-$$" send-keys -t "$S" "/exit" Enter
if wait_for 'CHAT-EXITED rc=0' 10; then ok "/exit quits with 0"; else bad "/exit quits with 0"; fi
if [ -s "$TMP/history" ]; then ok "history file written"; else bad "history file written"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
