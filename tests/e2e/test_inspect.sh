#!/usr/bin/env bash
# test_inspect.sh - `tern inspect --json` on every fixture against the facts
# stated in the fixture READMEs (shared/fixtures/*/README.md); plus usage and
# bad-input behaviour. Usage: bash test_inspect.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_inspect.sh /path/to/tern}
FIX=${TERN_FIXTURES:-${TERN_FIXTURES_DEFAULT:-}}
if [ -z "$FIX" ] || [ ! -d "$FIX/qwen35-tiny" ]; then
  echo "*** FIXTURES MISSING: set TERN_FIXTURES; test_inspect SKIPPED ***"
  exit 77
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
ck() { if "$@"; then :; else echo "FAIL: $*"; fail=1; fi; }

# usage
"$TERN" inspect --help > "$TMP/help" ; ck test $? -eq 0
ck grep -q -- --json "$TMP/help"
"$TERN" inspect --bogus 2> "$TMP/err" ; ck test $? -eq 2
ck test "$(wc -l < "$TMP/err")" -eq 1
"$TERN" inspect 2>/dev/null ; ck test $? -eq 2
# bad input: truncated / corrupted copies fail with exit 1 and name the file
head -c 100000 "$FIX/qwen35-tiny/model-pq2_0.gguf" > "$TMP/trunc.gguf"
"$TERN" inspect "$TMP/trunc.gguf" 2> "$TMP/err" ; ck test $? -eq 1
ck grep -q "trunc.gguf" "$TMP/err"
printf 'GGUF\x02\x00\x00\x00' > "$TMP/v2.gguf"
"$TERN" inspect "$TMP/v2.gguf" 2> "$TMP/err" ; ck test $? -eq 1
ck grep -q "v2.gguf" "$TMP/err"
"$TERN" inspect "$TMP/nonexistent.gguf" 2>/dev/null ; ck test $? -eq 1
# human output works on every fixture
for f in qwen35-tiny/model-pq2_0.gguf qwen35-tiny/model-ptq1_0.gguf qwen35-tiny/model-q2_0-nohadamard.gguf \
         qwen3-tiny/model-q2_0.gguf qwen3-tiny/model-q2_0_g64.gguf qwen35-tiny/mlx-pack; do
  "$TERN" inspect "$FIX/$f" > "$TMP/human" ; ck test $? -eq 0
  ck grep -q "total tensor bytes" "$TMP/human"
  "$TERN" inspect "$FIX/$f" --json > "$TMP/$(echo "$f" | tr '/' '_').json" ; ck test $? -eq 0
done

python3 - "$TMP" "$FIX" <<'PY' || fail=1
import json, os, sys
tmp, fix = sys.argv[1], sys.argv[2]
bad = []
def load(f): return json.load(open(os.path.join(tmp, f.replace('/', '_') + '.json')))
def eq(what, a, b):
    if a != b: bad.append(f"{what}: {a!r} != {b!r}")
def near(what, a, b, rel=1e-6):
    if abs(a - b) > rel * abs(b): bad.append(f"{what}: {a!r} !~ {b!r}")
def types(j):
    c = {}
    for t in j['tensors']: c[t['type']] = c.get(t['type'], 0) + 1
    return c
def tensor(j, n): return next((t for t in j['tensors'] if t['name'] == n), None)

# qwen35-tiny README: config + conventions
q35 = {'block_count': 4, 'context_length': 4096, 'embedding_length': 1024, 'feed_forward_length': 2048,
       'attention.head_count': 12, 'attention.head_count_kv': 2, 'attention.key_length': 256,
       'attention.value_length': 256, 'ssm.state_size': 128, 'ssm.group_count': 8, 'ssm.time_step_rank': 24,
       'ssm.inner_size': 3072, 'ssm.conv_kernel': 4, 'full_attention_interval': 4, 'rope.dimension_count': 64}
sizes = {'qwen35-tiny/model-pq2_0.gguf': 21628000, 'qwen35-tiny/model-ptq1_0.gguf': 17941600,
         'qwen35-tiny/model-q2_0-nohadamard.gguf': 21346400}
for f, tt, ft, bpb in [('qwen35-tiny/model-pq2_0.gguf', 'PQ2_0', 141, 34), ('qwen35-tiny/model-ptq1_0.gguf', 'PTQ1_0', 143, 28),
                       ('qwen35-tiny/model-q2_0-nohadamard.gguf', 'Q2_0', 41, 34)]:
    j = load(f)
    eq(f + ' architecture', j['architecture'], 'qwen35')
    m = j['metadata']
    for k, v in q35.items(): eq(f + ' ' + k, m.get('qwen35.' + k), v)
    eq(f + ' dimension_sections', m.get('qwen35.rope.dimension_sections'), [11, 11, 10, 0])
    near(f + ' freq_base', m['qwen35.rope.freq_base'], 1e7)
    near(f + ' eps', m['qwen35.attention.layer_norm_rms_epsilon'], 1e-6)
    eq(f + ' file_type', m['general.file_type'], ft)
    eq(f + ' file_bytes', j['file_bytes'], sizes[f])
    eq(f + ' total_bytes', j['total_bytes'], sum(t['bytes'] for t in j['tensors']))
    c = types(j)
    # model C: the converter also writes ssm_alpha/ssm_beta (3 GDN layers) as Q2_0
    eq(f + ' n ternary', (c.get(tt), c.get('F32')), (27, 23) if tt != 'Q2_0' else (33, 23))
    o = tensor(j, 'output.weight')
    eq(f + ' output.weight', (o['type'], o['shape'], o['bytes']), (tt, [1024, 4096], 4096 * 8 * bpb))
    eq(f + ' untied', tensor(j, 'token_embd.weight') is not None, True)
    eq(f + ' conv1d', tensor(j, 'blk.0.ssm_conv1d.weight')['shape'], [4, 5120])
    eq(f + ' attn_q', tensor(j, 'blk.3.attn_q.weight')['shape'], [1024, 6144])
    t = j['tokenizer']
    eq(f + ' tokenizer', (t['model'], t['pre'], t['vocab_size'], t['bos_token_id'], t['eos_token_id'],
                          t['padding_token_id'], t['add_bos_token']), ('gpt2', 'qwen35', 4096, 4091, 4093, 4091, False))
    h = j['hadamard']
    if tt == 'Q2_0':
        eq(f + ' hadamard', h, None)
        continue
    eq(f + ' hadamard', (h['version'], h['block_size'], h['transform'], h['axis'], h['sign_widths'], h['gdn_v_grouped'],
                         h['inverse_weight_names']),
       (1, 1024, 'normalized-sylvester-walsh-hadamard', 'input-last-dimension', [1024, 3072, 2048], True, ['token_embd.weight']))
    # every PQ2_0/PTQ1_0 tensor except token_embd is folded
    want = sorted(t['name'] for t in j['tensors'] if t['type'] == tt and t['name'] != 'token_embd.weight')
    eq(f + ' weight_names', sorted(h['weight_names']), want)
    eq(f + ' sign counts', sum(h['negative_signs']) > 0, True)
eq('ptq1_0 has same tensor order', [t['name'] for t in load('qwen35-tiny/model-ptq1_0.gguf')['tensors']],
   [t['name'] for t in load('qwen35-tiny/model-pq2_0.gguf')['tensors']])

# qwen3-tiny README
q3 = {'block_count': 4, 'context_length': 4096, 'embedding_length': 512, 'feed_forward_length': 1536,
      'attention.head_count': 8, 'attention.head_count_kv': 2, 'attention.key_length': 128, 'attention.value_length': 128}
for f, tt, bpb, be in [('qwen3-tiny/model-q2_0.gguf', 'Q2_0', 34, 128), ('qwen3-tiny/model-q2_0_g64.gguf', 'Q2_0_G64', 18, 64)]:
    j = load(f)
    eq(f + ' architecture', j['architecture'], 'qwen3')
    m = j['metadata']
    for k, v in q3.items(): eq(f + ' ' + k, m.get('qwen3.' + k), v)
    near(f + ' freq_base', m['qwen3.rope.freq_base'], 1e6)
    eq(f + ' file_type', m['general.file_type'], 41)
    eq(f + ' hadamard', j['hadamard'], None)
    eq(f + ' no output.weight (tied)', tensor(j, 'output.weight'), None)
    c = types(j)
    eq(f + ' types', (c.get(tt), c.get('F32')), (29, 17))
    e = tensor(j, 'token_embd.weight')
    eq(f + ' token_embd', (e['shape'], e['bytes']), ([512, 4096], 4096 * 512 // be * bpb))
    eq(f + ' attn_q', tensor(j, 'blk.0.attn_q.weight')['shape'], [512, 1024])
    eq(f + ' attn_output', tensor(j, 'blk.0.attn_output.weight')['shape'], [1024, 512])
    t = j['tokenizer']
    eq(f + ' tokenizer', (t['model'], t['pre'], t['vocab_size'], t['bos_token_id'], t['eos_token_id']),
       ('gpt2', 'qwen2', 4096, 4091, 4093))

# MLX pack: same hyperparameters as the GGUF, README conventions
j = load('qwen35-tiny/mlx-pack')
g = load('qwen35-tiny/model-pq2_0.gguf')
eq('pack architecture', j['architecture'], 'qwen35')
for k, v in g['metadata'].items():
    if k.startswith('qwen35.'):
        if isinstance(v, float): near('pack ' + k, j['metadata'].get(k, 0.0), v, 1e-6)
        else: eq('pack ' + k, j['metadata'].get(k), v)
c = types(j)
eq('pack U32 modules', c.get('U32'), 27)
eq('pack quantization', (j['quantization']['bits'], j['quantization']['group_size']), (2, 128))
lm = tensor(j, 'language_model.lm_head.weight')
eq('pack lm_head', (lm['type'], lm['shape']), ('U32', [4096, 64]))
eq('pack conv1d', tensor(j, 'language_model.model.layers.0.linear_attn.conv1d.weight')['shape'], [5120, 4, 1])
h = j['hadamard']
eq('pack hadamard', (h['sign_widths'], h['negative_signs'], len(h['weight_names']), h['inverse_weight_names'], h['gdn_v_grouped']),
   ([1024, 3072, 2048], g['hadamard']['negative_signs'], 26, ['language_model.model.embed_tokens.weight'], True))
eq('pack tokenizer', (j['tokenizer']['vocab_size'], j['tokenizer']['bos_token_id'], j['tokenizer']['eos_token_id']), (4096, 4091, 4093))
for b in bad: print('FAIL:', b)
print(f"inspect json checks: {len(bad)} failures")
sys.exit(1 if bad else 0)
PY
[ $fail -eq 0 ] && echo "test_inspect: ok" || echo "test_inspect: FAILED"
exit $fail
