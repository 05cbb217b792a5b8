"""The BERT-style encoder of models_spec.BERT in JAX (for bench_jax.py): the same layers as
bench_torch.Bert (post-norm, exact GELU, additive -10000 mask on padding keys, tanh pooler on the
first token), and AdamW as torch.optim.AdamW computes it."""
import jax
import jax.numpy as jnp

from models_spec import BERT, BERT_LR, BERT_WEIGHT_DECAY

EPS = 1e-12


def _dense(key, fin, fout):
    k1, k2 = jax.random.split(key)
    bound = 1.0 / (fin ** 0.5)
    return {"w": jax.random.uniform(k1, (fin, fout), jnp.float32, -bound, bound),
            "b": jax.random.uniform(k2, (fout,), jnp.float32, -bound, bound)}


def _norm(h):
    return {"g": jnp.ones((h,), jnp.float32), "b": jnp.zeros((h,), jnp.float32)}


def init(key, c=BERT):
    h, keys = c["hidden"], iter(jax.random.split(key, 8 + 8 * c["layers"]))
    layers = [{name: _dense(next(keys), h, h) for name in ("q", "k", "v", "o")}
              | {"ff1": _dense(next(keys), h, c["ffn"]), "ff2": _dense(next(keys), c["ffn"], h),
                 "n1": _norm(h), "n2": _norm(h)} for _ in range(c["layers"])]
    params = {"tokens": jax.random.normal(next(keys), (c["vocab"], h), jnp.float32),
              "positions": jax.random.normal(next(keys), (c["positions"], h), jnp.float32),
              "norm": _norm(h), "layers": layers,
              "pooler": _dense(next(keys), h, h), "classifier": _dense(next(keys), h, c["classes"])}
    return params, {}


def _layer_norm(p, x):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + EPS) * p["g"] + p["b"]


def _lin(p, x):
    return x @ p["w"] + p["b"]


def apply(p, s, ids, train, heads=BERT["heads"]):
    b, seq = ids.shape
    mask = jnp.where(ids == 0, -10000.0, 0.0)[:, None, None, :]
    x = _layer_norm(p["norm"], p["tokens"][ids] + p["positions"][:seq])
    h = x.shape[-1]
    for lp in p["layers"]:
        def split(t):
            return t.reshape(b, seq, heads, h // heads).transpose(0, 2, 1, 3)
        q, k, v = split(_lin(lp["q"], x)), split(_lin(lp["k"], x)), split(_lin(lp["v"], x))
        scores = q @ k.transpose(0, 1, 3, 2) / (h // heads) ** 0.5 + mask
        ctx = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, seq, h)
        x = _layer_norm(lp["n1"], x + _lin(lp["o"], ctx))
        ff = _lin(lp["ff2"], jax.nn.gelu(_lin(lp["ff1"], x), approximate=False))
        x = _layer_norm(lp["n2"], x + ff)
    return _lin(p["classifier"], jnp.tanh(_lin(p["pooler"], x[:, 0]))), s


def adamw_init(params):
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return {"m": zeros, "v": jax.tree_util.tree_map(jnp.zeros_like, params), "t": jnp.zeros((), jnp.float32)}


def adamw_update(p, opt, g, b1=0.9, b2=0.999, eps=1e-8):
    t = opt["t"] + 1.0
    m = jax.tree_util.tree_map(lambda mm, gg: b1 * mm + (1 - b1) * gg, opt["m"], g)
    v = jax.tree_util.tree_map(lambda vv, gg: b2 * vv + (1 - b2) * gg * gg, opt["v"], g)
    c1, c2 = 1 - b1 ** t, 1 - b2 ** t

    def upd(pp, mm, vv):
        pp = pp * (1 - BERT_LR * BERT_WEIGHT_DECAY)
        return pp - BERT_LR * (mm / c1) / (jnp.sqrt(vv / c2) + eps)
    return jax.tree_util.tree_map(upd, p, m, v), {"m": m, "v": v, "t": t}
