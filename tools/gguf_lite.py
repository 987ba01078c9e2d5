"""gguf_lite.py - a minimal GGUF v3 reader/writer for tern's Python test oracles.

Knows the ternary types stock gguf-py does not (PQ2_0 142, PTQ1_0 143) and both
Q2_0 (42) layouts. Reads metadata in file order and tensor infos; data as bytes.
Used by tests/e2e/test_quantize.sh helpers (tools/hf_from_gguf.py). Not needed to
run tern.
"""
import struct
import numpy as np

VT_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
          10: "<Q", 11: "<q", 12: "<d"}
# ggml type -> (block elems, block bytes)
TYPES = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 142: (128, 34), 143: (128, 28),
         41: (128, 18), 42: (128, 34)}


class Reader:
    def __init__(self, path):
        self.buf = open(path, "rb").read()
        b = self.buf
        assert b[:4] == b"GGUF"
        self.version, = struct.unpack_from("<I", b, 4)
        nt, nkv = struct.unpack_from("<QQ", b, 8)
        self.pos = 24
        self.kv = {}          # key -> (vtype, value, elemtype or None)
        for _ in range(nkv):
            k = self._str()
            vt = self._u32()
            if vt == 9:
                et = self._u32()
                n = self._u64()
                if et == 8:
                    val = [self._str() for _ in range(n)]
                else:
                    f = VT_FMT[et]
                    sz = struct.calcsize(f)
                    val = list(np.frombuffer(b, dtype=np.dtype(f), count=n, offset=self.pos))
                    self.pos += sz * n
                self.kv[k] = (9, val, et)
            else:
                self.kv[k] = (vt, self._val(vt), None)
        self.tensors = []
        for _ in range(nt):
            name = self._str()
            nd = self._u32()
            ne = [self._u64() for _ in range(nd)]
            t = self._u32()
            off = self._u64()
            self.tensors.append({"name": name, "ne": ne, "type": t, "offset": off})
        self.alignment = self.kv.get("general.alignment", (4, 32, None))[1]
        self.data_offset = (self.pos + self.alignment - 1) // self.alignment * self.alignment
        offs = [t["offset"] for t in self.tensors] + [len(b) - self.data_offset]
        order = sorted(range(len(self.tensors)), key=lambda i: self.tensors[i]["offset"])
        for idx, i in enumerate(order):
            t = self.tensors[i]
            nxt = self.tensors[order[idx + 1]]["offset"] if idx + 1 < len(order) else len(b) - self.data_offset
            n = int(np.prod(t["ne"]))
            be, bb = TYPES.get(t["type"], (1, 1))
            nb = n // be * bb
            if t["type"] == 42 and nb > nxt - t["offset"]:
                be, bb = 64, 18
                nb = n // 64 * 18
                t["g64"] = True
            t["nbytes"] = nb
            t["data"] = b[self.data_offset + t["offset"]: self.data_offset + t["offset"] + nb]
        self.by_name = {t["name"]: t for t in self.tensors}

    def _u32(self):
        v, = struct.unpack_from("<I", self.buf, self.pos); self.pos += 4; return v

    def _u64(self):
        v, = struct.unpack_from("<Q", self.buf, self.pos); self.pos += 8; return v

    def _str(self):
        n = self._u64()
        s = self.buf[self.pos:self.pos + n].decode("utf-8"); self.pos += n; return s

    def _val(self, vt):
        if vt == 8:
            return self._str()
        f = VT_FMT[vt]
        v, = struct.unpack_from(f, self.buf, self.pos)
        self.pos += struct.calcsize(f)
        return v


def decode_ternary(t):
    """codes (uint8 0..2, shape [N, K]) and fp16 scales [N, K/128] of a g128 ternary tensor."""
    K = t["ne"][0]
    N = int(np.prod(t["ne"])) // K
    raw = np.frombuffer(t["data"], dtype=np.uint8)
    if t["type"] in (142, 42) and not t.get("g64"):
        blk = raw.reshape(N, K // 128, 34)
        d = blk[:, :, :2].copy().view(np.float16).reshape(N, K // 128)
        q = blk[:, :, 2:]
        codes = np.stack([(q >> (2 * i)) & 3 for i in range(4)], axis=-1).reshape(N, K)
        return codes, d
    if t["type"] == 42 and t.get("g64"):
        blk = raw.reshape(N, K // 64, 18)
        d = blk[:, :, :2].copy().view(np.float16).reshape(N, K // 64)
        q = blk[:, :, 2:]
        codes = np.stack([(q >> (2 * i)) & 3 for i in range(4)], axis=-1).reshape(N, K)
        return codes, d
    raise ValueError("unsupported type %d" % t["type"])


def dequant(t):
    """float32 array [N, K] (or [n] for 1-D) of any tensor tern's fixtures use."""
    K = t["ne"][0]
    N = int(np.prod(t["ne"])) // K
    if t["type"] == 0:
        return np.frombuffer(t["data"], dtype=np.float32).reshape(N, K)
    if t["type"] == 1:
        return np.frombuffer(t["data"], dtype=np.float16).astype(np.float32).reshape(N, K)
    if t["type"] == 30:
        u = np.frombuffer(t["data"], dtype=np.uint16).astype(np.uint32) << 16
        return u.view(np.float32).reshape(N, K)
    codes, d = decode_ternary(t)
    g = K // d.shape[1]
    return ((codes.astype(np.float32) - 1) * np.repeat(d.astype(np.float32), g, axis=1))
