"""An independent reference decoder in Python (Debian's python3-torch), written differently on
purpose from llm/decoder.cc: it reads the safetensors bytes itself, keeps no KV cache and
recomputes the whole sequence at every step, loops over attention heads one by one, and
builds rotary embeddings and masks element by element. Formulas follow Hugging Face's
modeling files for Llama, Qwen3, Granite, Gemma 2 and Gemma 3."""
import json
import math
import os
import struct

import torch

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(directory):
    """All tensors of a checkpoint directory (single file or sharded), as float32."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        with open(os.path.join(directory, name), "rb") as f:
            blob = f.read()
        (header_len,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + header_len])
        data = blob[8 + header_len:]
        for key, info in header.items():
            if key == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            raw = bytearray(data[begin:end])
            t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]) if raw else torch.zeros(0, dtype=DTYPES[info["dtype"]])
            tensors[key] = t.reshape(info["shape"]).to(torch.float32)
    return tensors


class Config:
    def __init__(self, raw):
        text = raw.get("text_config", raw) if raw["model_type"] == "gemma3" else raw
        self.model_type = text.get("model_type", raw["model_type"])
        self.family = {"llama": "llama", "qwen3": "qwen3", "granite": "granite", "gemma2": "gemma2",
                       "gemma3_text": "gemma3"}[self.model_type]
        gemma = self.family in ("gemma2", "gemma3")
        self.hidden = text["hidden_size"]
        self.layers = text["num_hidden_layers"]
        self.heads = text["num_attention_heads"]
        self.kv_heads = text.get("num_key_value_heads") or self.heads
        self.head_dim = text.get("head_dim") or self.hidden // self.heads
        self.eps = text.get("rms_norm_eps", 1e-6)
        self.act = text.get("hidden_activation") or text.get("hidden_act", "silu")
        self.rope_theta = text.get("rope_theta", 10000.0)
        self.rope_scaling = text.get("rope_scaling")
        self.local_rope_theta = text.get("rope_local_base_freq", 10000.0) if self.family == "gemma3" else None
        self.qk_norm = self.family in ("qwen3", "gemma3")
        self.plus_one = gemma
        self.embedding_multiplier = text.get("embedding_multiplier", 1.0)
        self.residual_multiplier = text.get("residual_multiplier", 1.0)
        self.logits_scaling = text.get("logits_scaling", 1.0)
        if self.family == "granite":
            self.scale = text.get("attention_multiplier", 1.0 / math.sqrt(self.head_dim))
        elif gemma:
            self.scale = text.get("query_pre_attn_scalar", 256) ** -0.5
        else:
            self.scale = 1.0 / math.sqrt(self.head_dim)
        self.attn_softcap = text.get("attn_logit_softcapping") if gemma else None
        self.final_softcap = text.get("final_logit_softcapping") if gemma else None
        self.window = text.get("sliding_window") if gemma else None
        if "layer_types" in text:
            self.sliding = [t == "sliding_attention" for t in text["layer_types"]]
        elif self.family == "gemma2":
            self.sliding = [i % 2 == 0 for i in range(self.layers)]
        elif self.family == "gemma3":
            pattern = text.get("sliding_window_pattern", 6)
            self.sliding = [(i + 1) % pattern != 0 for i in range(self.layers)]
        else:
            self.sliding = [False] * self.layers


def inverse_frequencies(theta, dim, scaling):
    freqs = []
    for i in range(0, dim, 2):
        freqs.append(1.0 / (theta ** (i / dim)))
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind == "linear":
        freqs = [f / scaling["factor"] for f in freqs]
    elif kind == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        out = []
        for f in freqs:
            wavelen = 2 * math.pi / f
            if wavelen < old / high:
                out.append(f)
            elif wavelen > old / low:
                out.append(f / factor)
            else:
                smooth = (old / wavelen - low) / (high - low)
                out.append((1 - smooth) * f / factor + smooth * f)
        freqs = out
    return torch.tensor(freqs, dtype=torch.float32)


def rms_norm(x, weight, eps, plus_one):
    normed = x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps)
    return normed * ((1.0 + weight) if plus_one else weight)


def rotate(x, inv_freq):
    """x: [positions, head_dim]; rotates dimension pairs (d, d + half) by position * freq."""
    half = x.shape[-1] // 2
    positions = torch.arange(x.shape[0], dtype=torch.float32)[:, None]
    angle = positions * inv_freq[None, :]
    c, s = torch.cos(angle), torch.sin(angle)
    first, second = x[:, :half], x[:, half:]
    return torch.cat([first * c - second * s, second * c + first * s], dim=-1)


class ReferenceDecoder:
    def __init__(self, directory):
        with open(os.path.join(directory, "config.json")) as f:
            self.c = Config(json.load(f))
        self.w = read_safetensors(directory)
        prefix = "model." if "model.embed_tokens.weight" in self.w else "language_model.model."
        self.p = prefix
        self.head = self.w.get("lm_head.weight", self.w[prefix + "embed_tokens.weight"])
        self.global_freq = inverse_frequencies(self.c.rope_theta, self.c.head_dim, self.c.rope_scaling)
        self.local_freq = (inverse_frequencies(self.c.local_rope_theta, self.c.head_dim, None)
                           if self.c.local_rope_theta else self.global_freq)

    def logits(self, ids):
        """Logits after every position of `ids`, computed from scratch: [len(ids), vocab]."""
        c, w, p = self.c, self.w, self.p
        x = w[p + "embed_tokens.weight"][torch.tensor(ids)]
        if c.family in ("gemma2", "gemma3"):
            x = x * math.sqrt(c.hidden)
        else:
            x = x * c.embedding_multiplier
        n = len(ids)
        for layer in range(c.layers):
            lp = f"{p}layers.{layer}."
            h = rms_norm(x, w[lp + "input_layernorm.weight"], c.eps, c.plus_one)
            q = (h @ w[lp + "self_attn.q_proj.weight"].T).reshape(n, c.heads, c.head_dim)
            k = (h @ w[lp + "self_attn.k_proj.weight"].T).reshape(n, c.kv_heads, c.head_dim)
            v = (h @ w[lp + "self_attn.v_proj.weight"].T).reshape(n, c.kv_heads, c.head_dim)
            freq = self.local_freq if c.sliding[layer] else self.global_freq
            heads_out = []
            for head in range(c.heads):
                kv = head // (c.heads // c.kv_heads)
                qh, kh = q[:, head, :], k[:, kv, :]
                if c.qk_norm:
                    qh = rms_norm(qh, w[lp + "self_attn.q_norm.weight"], c.eps, c.plus_one)
                    kh = rms_norm(kh, w[lp + "self_attn.k_norm.weight"], c.eps, c.plus_one)
                qh, kh = rotate(qh, freq), rotate(kh, freq)
                scores = (qh @ kh.T) * c.scale
                if c.attn_softcap:
                    scores = torch.tanh(scores / c.attn_softcap) * c.attn_softcap
                for i in range(n):
                    for j in range(n):
                        if j > i or (c.sliding[layer] and i - j >= c.window):
                            scores[i, j] = float("-inf")
                heads_out.append(torch.softmax(scores, dim=-1) @ v[:, kv, :])
            attn = torch.cat(heads_out, dim=-1) @ w[lp + "self_attn.o_proj.weight"].T
            if c.plus_one:
                attn = rms_norm(attn, w[lp + "post_attention_layernorm.weight"], c.eps, True)
            x = x + attn * c.residual_multiplier
            norm_name = "pre_feedforward_layernorm" if c.plus_one else "post_attention_layernorm"
            h = rms_norm(x, w[lp + norm_name + ".weight"], c.eps, c.plus_one)
            gate = h @ w[lp + "mlp.gate_proj.weight"].T
            if c.act == "silu":
                gate = gate * torch.sigmoid(gate)
            else:  # gelu_pytorch_tanh
                gate = 0.5 * gate * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (gate + 0.044715 * gate ** 3)))
            mlp = (gate * (h @ w[lp + "mlp.up_proj.weight"].T)) @ w[lp + "mlp.down_proj.weight"].T
            if c.plus_one:
                mlp = rms_norm(mlp, w[lp + "post_feedforward_layernorm.weight"], c.eps, True)
            x = x + mlp * c.residual_multiplier
        x = rms_norm(x, w[p + "norm.weight"], c.eps, c.plus_one)
        logits = (x @ self.head.T) / c.logits_scaling
        if c.final_softcap:
            logits = torch.tanh(logits / c.final_softcap) * c.final_softcap
        return logits
