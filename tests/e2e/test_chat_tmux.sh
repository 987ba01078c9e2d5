#!/usr/bin/env bash
# test_chat_tmux.sh - `tern chat` in a real terminal (tmux send-keys /
# capture-pane): the reply streams (the pane grows while it is generated),
# Ctrl-C stops it and the conversation is kept (/info shows the context still
# filled and growing on the next turn), /think, /reset, line editing history
# (Up recalls the last line), Ctrl-C at the prompt, /exit (on the qwen35-tiny fixture;
# that part skips loudly without fixtures). Then, on the embedded model (greedy, so the
# same every run): a bracketed paste of 3 lines (sent as raw escape sequences, and through
# tmux's own paste-buffer -p, which brackets only when the program asked for it) is one
# message with one reply, a """ block and a trailing backslash likewise (/history shows
# the turns); with --ctx 256 the oldest turns are dropped with a notice and the chat goes
# on; with --no-context-shift it stops and asks for /reset. Skips loudly when tmux is missing.
# Usage: bash test_chat_tmux.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_chat_tmux.sh /path/to/tern}
TERN=$(cd "$(dirname "$TERN")" && pwd)/$(basename "$TERN")
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
FIX=${TERN_FIXTURES:-${TERN_FIXTURES_DEFAULT:-$SRC/../shared/fixtures}}
if ! command -v tmux >/dev/null; then echo "*** SKIPPED: tmux is not installed (apt-get install tmux) ***"; exit 77; fi
MODEL="$FIX/qwen35-tiny/model-pq2_0.gguf"
DEFAULT_MODEL="$SRC/models/tern-default.gguf"
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

fixture_part() {
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
}
if [ -d "$FIX/qwen35-tiny" ]; then fixture_part
else echo "*** SKIPPED (fixture part): fixtures missing ($FIX) ***"; fi
# ---- the embedded model: pasted and multi-line messages, context shift --------------
if [ ! -f "$DEFAULT_MODEL" ]; then echo "*** SKIPPED (embedded-model part): $DEFAULT_MODEL missing ***"
else
T="tmux -L tern-test-$$"
pane() { $T capture-pane -p -J -t "$S" -S - 2>/dev/null; }   # the whole history, wrapped lines joined
# wait_count REGEX N [seconds]: poll until the pane holds N lines matching REGEX
wait_count() { local t=${3:-30}; for _ in $(seq $((t * 10))); do [ "$(count "$1")" -ge "$2" ] && return 0; sleep 0.1; done; return 1; }
STATS='^\[[0-9]+ prompt tokens'   # one line per reply
start_chat() {  # start_chat NAME ARGS...: a chat on the embedded model in session NAME
  S=$1; shift
  $T new-session -d -s "$S" -x 160 -y 50 \
    "TERN_HISTORY=$TMP/history-$S '$TERN' chat -m '$DEFAULT_MODEL' --temp 0 $*; echo CHAT-EXITED rc=\$?; sleep 60"
  wait_for '^>( |$)' 30
}

if start_chat input -n 16 --ctx 2048; then ok "embedded model: prompt appears"; else bad "embedded model: prompt appears"; fi
# a bracketed paste of 3 lines, raw escape sequences and CRs as a terminal sends them, after typed text
$T send-keys -t "$S" -l $'Look: \e[200~alpha line\rbeta line\rgamma line\e[201~'
if wait_for '^gamma line$' 10 && wait_for '^\.\.\.' 10 && [ "$(count "$STATS")" -eq 0 ]; then
  ok "a paste is shown and waits for Enter"; else bad "a paste is shown and waits for Enter"; fi
$T send-keys -t "$S" Enter
if wait_count "$STATS" 1 30; then ok "pasted text: a reply"; else bad "pasted text: a reply"; fi
$T send-keys -t "$S" "/history" Enter
if wait_for '^\[history: 1 turn kept' 10 && [ "$(count '^\[turn [0-9]+ user')" -eq 1 ] &&
   pane | grep -q '^\[turn 1 user, 3 lines\]' && pane | grep -q '^Look: alpha line$'; then
  ok "a 3-line paste is one user message"; else bad "a 3-line paste is one user message"; fi
# tmux's own paste: brackets only when the program turned bracketed paste on (ESC[?2004h)
$T set-buffer -b tern-paste $'one\ntwo\nthree'
$T paste-buffer -p -b tern-paste -t "$S"
if wait_for '^three$' 10; then ok "paste-buffer -p shown"; else bad "paste-buffer -p shown"; fi
$T send-keys -t "$S" Enter
if wait_count "$STATS" 2 30; then ok "paste-buffer -p: a reply"; else bad "paste-buffer -p: a reply"; fi
# a """ block: no reply until it closes
$T send-keys -t "$S" '"""' Enter "first line" Enter "second line" Enter
if wait_for '^\.\.\. second line' 10 && [ "$(count "$STATS")" -eq 2 ]; then ok '""" block waits for its end'
else bad '""" block waits for its end'; fi
$T send-keys -t "$S" '"""' Enter
if wait_count "$STATS" 3 30; then ok '""" block: a reply'; else bad '""" block: a reply'; fi
# a trailing backslash goes on on the next line
$T send-keys -t "$S" -l 'left part \'
$T send-keys -t "$S" Enter "right part" Enter
if wait_count "$STATS" 4 30; then ok "trailing backslash: a reply"; else bad "trailing backslash: a reply"; fi
$T send-keys -t "$S" "/history" Enter
if wait_for '^\[history: 4 turns kept' 10; then ok "/history: 4 turns"; else bad "/history: 4 turns"; fi
h=$(pane | sed -n '/^\[history: 4 turns kept/,$p')
if echo "$h" | grep -q '^\[turn 2 user, 3 lines\]' && echo "$h" | grep -q '^\[turn 3 user, 2 lines\]' &&
   echo "$h" | grep -q '^\[turn 4 user, 2 lines\]' && echo "$h" | grep -q '^left part *$' &&
   echo "$h" | grep -q '^right part$' && ! echo "$h" | grep -q '"""'; then
  ok "paste-buffer, block and backslash: one message each"; else bad "paste-buffer, block and backslash: one message each"; fi
if [ "$(count "$STATS")" -eq 4 ]; then ok "one reply per message (4)"; else bad "one reply per message ($(count "$STATS"))"; fi
# typed non-ASCII keys reach the message whole (libedit reads them through our key reader)
$T send-keys -t "$S" -l 'café ünï 日本'
$T send-keys -t "$S" Enter
wait_count "$STATS" 5 30
$T send-keys -t "$S" "/history" Enter
if wait_for '^\[history: 5 turns kept' 10 && pane | grep -q '^café ünï 日本$'; then ok "typed UTF-8 kept"
else bad "typed UTF-8 kept"; fi
$T send-keys -t "$S" "/exit" Enter
if wait_for 'CHAT-EXITED rc=0' 10; then ok "/exit after pastes"; else bad "/exit after pastes"; fi

# context shift: 256 positions, 40-token replies, a system prompt: the 5th turn does not fit
start_chat shift -n 40 --ctx 256 --system "'You are terse.'"
n=0
for i in 1 2 3 4 5 6 7 8; do
  $T send-keys -t "$S" "Message number $i" Enter
  wait_count "$STATS" $i 60 || break
  n=$i
done
if [ "$n" -eq 8 ]; then ok "context shift: 8 turns answered"; else bad "context shift: 8 turns answered ($n)"; fi
if pane | grep -qE '^\[context full: dropped the oldest [0-9]+ turns? \([0-9]+ kept\); re-evaluating [0-9]+ tokens\]'; then
  ok "context shift: notice"; else bad "context shift: notice"; fi
$T send-keys -t "$S" "/history" Enter
if wait_for '^\[history: [0-9]+ turns? kept, [1-9][0-9]* dropped; system prompt set\]' 10 &&
   pane | grep -q '^\[turn 8 user, 1 line\]' && ! pane | grep -q '^\[turn 1 user'; then
  ok "context shift: oldest turns gone, system prompt kept"; else bad "context shift: oldest turns gone, system prompt kept"; fi
$T send-keys -t "$S" "/info" Enter
if wait_for '^\[context: [0-9]+ of 256 tokens; [0-9]+ turns kept, [1-9][0-9]* dropped' 10; then
  ok "context shift: /info counts"; else bad "context shift: /info counts"; fi
if ! pane | grep -q '/reset to start over'; then ok "context shift: never asks for /reset"; else bad "context shift: never asks for /reset"; fi
$T send-keys -t "$S" "/exit" Enter
if wait_for 'CHAT-EXITED rc=0' 10; then ok "context shift: /exit with 0"; else bad "context shift: /exit with 0"; fi

# --no-context-shift: the same turns stop at a full context, /reset goes on
start_chat noshift -n 40 --ctx 256 --no-context-shift
full=0
for i in 1 2 3 4 5 6 7 8; do
  $T send-keys -t "$S" "Message number $i" Enter
  for _ in $(seq 600); do
    if [ "$(count '/reset to start over')" -gt 0 ]; then full=$i; break; fi
    [ "$(count "$STATS")" -ge $i ] && break
    sleep 0.1
  done
  [ "$full" -gt 0 ] && break
done
if [ "$full" -gt 1 ] && pane | grep -qE '^\[context full: [0-9]+ of 256 positions used; /reset to start over\]'; then
  ok "--no-context-shift: turn $full stops at a full context"; else bad "--no-context-shift: stops at a full context ($full)"; fi
if ! pane | grep -q 'dropped the oldest'; then ok "--no-context-shift: nothing dropped"; else bad "--no-context-shift: nothing dropped"; fi
nr=$(count "$STATS")
$T send-keys -t "$S" "/reset" Enter
wait_for '^\[conversation cleared\]' 10
$T send-keys -t "$S" "Hello again" Enter
if wait_count "$STATS" $((nr + 1)) 30; then ok "--no-context-shift: /reset goes on"; else bad "--no-context-shift: /reset goes on"; fi
$T send-keys -t "$S" "/exit" Enter
if wait_for 'CHAT-EXITED rc=0' 10; then ok "--no-context-shift: /exit with 0"; else bad "--no-context-shift: /exit with 0"; fi
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
