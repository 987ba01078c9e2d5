#!/usr/bin/env python3
"""gen_fuzz_corpus.py - write the small seed corpora for tests/fuzz/ (GGUF,
safetensors, hadamard.json / config.json). Deterministic; every seed is a valid
file in the format its fuzzer reads, so mutations start from deep paths.

usage: python3 tools/gen_fuzz_corpus.py [OUT_DIR=tests/fuzz/corpus]
"""
import json, os, struct, sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', 'tests', 'fuzz', 'corpus')

def gguf(kvs, tensors, align=32):
    """kvs: [(key, type, value)], tensors: [(name, ne, ggml_type, nbytes)]"""
    def s(x):
        b = x.encode()
        return struct.pack('<Q', len(b)) + b
    fmt = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}
    def val(t, v):
        if t == 8: return s(v)
        if t == 9:
            et, items = v
            return struct.pack('<IQ', et, len(items)) + b''.join(val(et, i) for i in items)
        return struct.pack('<' + fmt[t], v)
    out = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(kvs))
    for k, t, v in kvs: out += s(k) + struct.pack('<I', t) + val(t, v)
    off = 0
    offs = []
    for name, ne, ty, nb in tensors:
        out += s(name) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', n) for n in ne)
        out += struct.pack('<IQ', ty, off)
        offs.append(off)
        off += (nb + align - 1) // align * align
    out += b'\0' * ((-len(out)) % align)
    for (name, ne, ty, nb), o in zip(tensors, offs):
        data = bytes((i * 37 + len(name)) & 0xff for i in range(nb))
        if ty in (42, 142):  # ternary codes 0..2 only, fp16 scale 0.5
            blk = 34 if ty == 142 or nb % 34 == 0 else 18
            data = b''.join(struct.pack('<H', 0x3800) + bytes([0x24] * (blk - 2)) for _ in range(nb // blk))
        out += data + b'\0' * ((-nb) % align)
    return out

def write(sub, name, data):
    d = os.path.join(OUT, sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data if isinstance(data, bytes) else data.encode())

signs16 = [1, -1, 1, 1, -1, -1, 1, -1, 1, 1, 1, -1, -1, 1, -1, 1]
signs32 = signs16 + [-s for s in signs16]
had = [('prism.hadamard.version', 4, 1), ('prism.hadamard.block_size', 4, 16),
       ('prism.hadamard.transform', 8, 'normalized-sylvester-walsh-hadamard'),
       ('prism.hadamard.axis', 8, 'input-last-dimension'), ('prism.hadamard.sign_mode', 8, 'explicit'),
       ('prism.hadamard.sign_widths', 9, (5, [128, 256])),
       ('prism.hadamard.sign_values', 9, (5, (signs16 * 8) + (signs32 * 8))),
       ('prism.hadamard.weight_names', 9, (8, ['output.weight', 'blk.0.ffn_down.weight'])),
       ('prism.hadamard.inverse_weight_names', 9, (8, ['token_embd.weight'])),
       ('prism.hadamard.gdn_v_grouped', 7, True)]
base = [('general.architecture', 8, 'qwen35'), ('general.alignment', 4, 32), ('qwen35.block_count', 4, 1),
        ('qwen35.rope.freq_base', 6, 1e7), ('qwen35.rope.dimension_sections', 9, (5, [11, 11, 10, 0])),
        ('a.u8', 0, 7), ('a.i8', 1, -7), ('a.u16', 2, 700), ('a.i16', 3, -700), ('a.u64', 10, 1 << 40),
        ('a.i64', 11, -(1 << 40)), ('a.f64', 12, 0.5), ('a.bool', 7, False),
        ('a.farr', 9, (6, [0.5, -1.0])), ('tokenizer.ggml.model', 8, 'gpt2'),
        ('tokenizer.ggml.tokens', 9, (8, ['a', 'b', 'ab'])), ('tokenizer.ggml.bos_token_id', 4, 0)]
tens = [('output.weight', [128, 4], 142, 4 * 34), ('token_embd.weight', [128, 4], 142, 4 * 34),
        ('blk.0.ffn_down.weight', [256, 2], 143, 2 * 2 * 28), ('blk.0.attn_norm.weight', [128], 0, 512),
        ('blk.0.ssm_alpha.weight', [8, 2], 30, 32), ('blk.0.x.f16', [4], 1, 8), ('blk.0.q8', [32, 2], 8, 68),
        ('blk.0.q1', [128, 1], 41, 18)]
write('fuzz_gguf', 'qwen35_small.gguf', gguf(base + had, tens))
write('fuzz_gguf', 'q2_0_fork.gguf', gguf(base[:3], [('w', [2048, 2], 42, 2 * 16 * 34), ('n', [8], 0, 32)]))
write('fuzz_gguf', 'q2_0_g64.gguf', gguf(base[:3], [('w', [2048, 2], 42, 2 * 32 * 18), ('n', [8], 0, 32)]))
write('fuzz_gguf', 'empty.gguf', gguf([], []))

def safetensors(entries, meta=None):
    hdr, off, data = {}, 0, b''
    if meta: hdr['__metadata__'] = meta
    for name, dt, shape, nb in entries:
        hdr[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + nb]}
        data += bytes((i * 11 + 3) & 0xff for i in range(nb))
        off += nb
    h = json.dumps(hdr, separators=(',', ':')).encode()
    h += b' ' * ((-len(h)) % 8)
    return struct.pack('<Q', len(h)) + h + data

write('fuzz_safetensors', 'pack_small.safetensors', safetensors([
    ('language_model.lm_head.weight', 'U32', [4, 8], 128), ('language_model.lm_head.scales', 'F16', [4, 1], 8),
    ('language_model.lm_head.biases', 'F16', [4, 1], 8), ('language_model.lm_head.signs', 'F16', [128], 256),
    ('language_model.model.norm.weight', 'F32', [16], 64), ('x.bf16', 'BF16', [2, 3], 12), ('x.i64', 'I64', [], 8),
    ('x.empty', 'F32', [0, 4], 0), ('x.u8', 'U8', [3], 3), ('x.bool', 'BOOL', [2], 2)], {'format': 'mlx'}))
write('fuzz_safetensors', 'plain.safetensors', safetensors([('a', 'F64', [2], 16), ('b', 'I32', [1, 1, 1], 4)]))

h = {'prism.hadamard.version': 1, 'prism.hadamard.block_size': 16,
     'prism.hadamard.transform': 'normalized-sylvester-walsh-hadamard', 'prism.hadamard.axis': 'input-last-dimension',
     'prism.hadamard.sign_mode': 'explicit', 'prism.hadamard.sign_widths': [16, 32],
     'prism.hadamard.sign_values': signs16 + signs32,
     'prism.hadamard.weight_names': ['language_model.lm_head.weight', 'language_model.model.layers.0.mlp.down_proj.weight'],
     'prism.hadamard.inverse_weight_names': ['language_model.model.embed_tokens.weight'],
     'prism.hadamard.gdn_v_grouped': True}
write('fuzz_json', 'hadamard.json', json.dumps(h, indent=1))
write('fuzz_json', 'hadamard_unprefixed.json', json.dumps({k.split('.')[-1]: v for k, v in h.items()}))
cfg = {'model_type': 'prism_hadamard_qwen35', 'quantization': {'bits': 2, 'group_size': 128, 'mode': 'affine'},
       'modules': [{'path': 'lm_head', 'block': 1024, 'embedding': False, 'dtype': 'float16'}],
       'text_config': {'model_type': 'qwen3_5_text', 'hidden_size': 1024, 'num_hidden_layers': 4,
                       'intermediate_size': 2048, 'num_attention_heads': 12, 'num_key_value_heads': 2, 'head_dim': 256,
                       'linear_num_value_heads': 24, 'linear_value_head_dim': 128, 'linear_num_key_heads': 8,
                       'linear_key_head_dim': 128, 'linear_conv_kernel_dim': 4, 'rms_norm_eps': 1e-6,
                       'partial_rotary_factor': 0.25,
                       'layer_types': ['linear_attention', 'linear_attention', 'linear_attention', 'full_attention'],
                       'rope_parameters': {'mrope_section': [11, 11, 10], 'rope_theta': 1e7}}}
write('fuzz_json', 'config_qwen35.json', json.dumps(cfg, indent=1))
write('fuzz_json', 'config_qwen3.json', json.dumps({'model_type': 'qwen3', 'hidden_size': 512, 'num_hidden_layers': 4,
                                                    'rope_theta': 1e6, 'head_dim': 128}))
