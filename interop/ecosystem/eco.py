"""The ecosystem tier's Python side: builds tiny models and pipelines with
transformers and diffusers, and loads what `ckpt convert` made of them back
with from_pretrained, reporting what it finds as JSON for the Go test
(interop/ecosystem_test.go) to judge.

    python eco.py build DIR          # writes the fixtures under DIR
    python eco.py check CASES RESULT # loads each case, writes RESULT (JSON)

No network (HF_HUB_OFFLINE=1 is set before the libraries are imported); every
model is randomly initialised from a fixed seed, so a build is deterministic.
"""

import glob
import json
import os
import sys
import tempfile
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
import diffusers  # noqa: E402
from safetensors import safe_open  # noqa: E402

torch.set_num_threads(2)

VOCAB = 256  # the text models' vocabulary


# ---------------------------------------------------------------- fixtures


def clip_tokenizer(dir):
    """A CLIPTokenizer built offline: CLIP's byte-level alphabet (each byte's
    character, alone and with </w>) and the two special tokens, no merges."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    chars = [chr(c) for c in cs]
    vocab = {}
    for c in chars:
        vocab[c] = len(vocab)
    for c in chars:
        vocab[c + "</w>"] = len(vocab)
    for s in ("<|startoftext|>", "<|endoftext|>"):
        vocab[s] = len(vocab)
    os.makedirs(dir, exist_ok=True)
    with open(os.path.join(dir, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(dir, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
    tok = transformers.CLIPTokenizer(os.path.join(dir, "vocab.json"), os.path.join(dir, "merges.txt"), model_max_length=16)
    return tok, vocab


def llama(intermediate=128):
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=intermediate, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg)


def bert():
    cfg = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=64)
    return transformers.BertModel(cfg)


def t5():
    cfg = transformers.T5Config(
        vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
        decoder_start_token_id=0)
    return transformers.T5ForConditionalGeneration(cfg)


def gpt2():
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


def clip_vision():
    cfg = transformers.CLIPVisionConfig(
        hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=2,
        image_size=32, patch_size=8)
    return transformers.CLIPVisionModel(cfg)


def sd_pipeline(dir):
    """A tiny StableDiffusionPipeline: UNet, VAE, CLIP text encoder, tokenizer,
    DDIM scheduler and an image encoder (CLIPVisionModelWithProjection, the
    IP-Adapter slot), every model a few hundred KB."""
    tok, vocab = clip_tokenizer(tempfile.mkdtemp())
    unet = diffusers.UNet2DConditionModel(
        block_out_channels=(32, 64), layers_per_block=1, sample_size=16, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32, norm_num_groups=8, attention_head_dim=8)
    vae = diffusers.AutoencoderKL(
        block_out_channels=[16, 32], in_channels=3, out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * 2, up_block_types=["UpDecoderBlock2D"] * 2,
        latent_channels=4, norm_num_groups=8)
    eos = vocab["<|endoftext|>"]
    te = transformers.CLIPTextModel(transformers.CLIPTextConfig(
        bos_token_id=vocab["<|startoftext|>"], eos_token_id=eos, pad_token_id=eos, hidden_size=32,
        intermediate_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=len(vocab),
        max_position_embeddings=16))
    ie = transformers.CLIPVisionModelWithProjection(transformers.CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_attention_heads=4, num_hidden_layers=2,
        image_size=32, patch_size=8, projection_dim=32))
    sch = diffusers.DDIMScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
        set_alpha_to_one=False, steps_offset=1)
    return diffusers.StableDiffusionPipeline(
        unet=unet, vae=vae, text_encoder=te, tokenizer=tok, scheduler=sch, safety_checker=None,
        feature_extractor=None, image_encoder=ie, requires_safety_checker=False)


def save_bin(model, dir, shards=1):
    """Writes model as transformers 4 did with safe_serialization=False:
    torch.save of the state dict (tied tensors share storage), as one
    pytorch_model.bin or as shards with pytorch_model.bin.index.json."""
    os.makedirs(dir, exist_ok=True)
    model.config.save_pretrained(dir)
    sd = model.state_dict()
    if shards == 1:
        torch.save(sd, os.path.join(dir, "pytorch_model.bin"))
        return
    keys = list(sd)
    weight_map = {}
    per = (len(keys) + shards - 1) // shards
    for i in range(shards):
        name = "pytorch_model-%05d-of-%05d.bin" % (i + 1, shards)
        part = {k: sd[k] for k in keys[i * per:(i + 1) * per]}
        torch.save(part, os.path.join(dir, name))
        weight_map.update({k: name for k in part})
    total = sum(t.numel() * t.element_size() for t in sd.values())
    with open(os.path.join(dir, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def build(root):
    def seeded(fn, *a):
        torch.manual_seed(0)
        return fn(*a)

    m = seeded(llama)
    m.save_pretrained(os.path.join(root, "llama"))
    m.save_pretrained(os.path.join(root, "llama-sharded"), max_shard_size="100KB")
    save_bin(m, os.path.join(root, "llama-bin"))
    save_bin(m, os.path.join(root, "llama-bin-sharded"), shards=3)
    # 96 is no multiple of 64: FP8 blocks of 64 leave partial edge blocks.
    seeded(llama, 96).save_pretrained(os.path.join(root, "llama-i96"))
    seeded(llama, 97).save_pretrained(os.path.join(root, "llama-i97"))
    seeded(bert).save_pretrained(os.path.join(root, "bert"))
    m = seeded(t5)
    m.save_pretrained(os.path.join(root, "t5"))
    save_bin(m, os.path.join(root, "t5-bin"))
    seeded(gpt2).save_pretrained(os.path.join(root, "gpt2"))
    seeded(clip_vision).save_pretrained(os.path.join(root, "clip-vision"))
    torch.manual_seed(0)
    sd_pipeline(os.path.join(root, "sd")).save_pretrained(os.path.join(root, "sd"))
    print("built", sorted(os.listdir(root)))


# ---------------------------------------------------------------- checks


def bits(t):
    """t's values as float32 bit patterns (exact for every float dtype up to
    32 bits), or t itself for other dtypes."""
    if t.is_floating_point():
        return t.detach().to(torch.float32).contiguous().view(torch.int32)
    return t.detach()


def read_files(dir):
    """Every tensor of the .safetensors files in dir (keys as stored)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(dir, "*.safetensors"))):
        with safe_open(path, framework="pt") as f:
            for k in f.keys():
                out[k] = f.get_tensor(k)
    return out


def expand(scale, shape, block):
    """scale broadcast to a weight of shape: a scalar, a [rows,1] column (per
    output channel), or a grid of block×block tiles, the last row and column
    of tiles cut to the weight's edge."""
    if scale.numel() == 1:
        return scale.reshape(1, 1).expand(*shape)
    if scale.dim() == 2 and scale.shape[1] == 1 and scale.shape[0] == shape[0] and not block:
        return scale.expand(*shape)
    if not block:
        raise ValueError("a grid of scales %s without a block size in config.json" % (tuple(scale.shape),))
    return scale.repeat_interleave(block[0], 0)[: shape[0]].repeat_interleave(block[1], 1)[:, : shape[1]]


def block_of(cfg_dir):
    with open(os.path.join(cfg_dir, "config.json")) as f:
        qc = json.load(f).get("quantization_config") or {}
    if "weight_block_size" in qc:
        return qc["weight_block_size"]
    for g in (qc.get("config_groups") or {}).values():
        b = g.get("weights", {}).get("block_structure")
        if b:
            return b
    return None


def fp8_expected(dir):
    """The FP8 weights stored in dir, each as (dequantized value, scale per
    element): code × scale in float32 (one exact product), with the scales
    laid out as the format defines them (compressed-tensors weight_scale,
    DeepSeek weight_scale_inv; per tensor, per output channel, or a grid of
    blocks whose last row and column may be partial)."""
    files = read_files(dir)
    block = block_of(dir)
    out = {}
    for k, q in files.items():
        if q.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
            continue
        scale = files.get(k + "_scale", files.get(k + "_scale_inv"))
        if scale is None:
            raise ValueError("%s: FP8 weight %s has no scale" % (dir, k))
        s = expand(scale.to(torch.float32), tuple(q.shape), block)
        out[k] = (q.to(torch.float32) * s, s)
    return out


def compare(name, loaded, source, expect, outdir, res):
    """Compares a loaded module's state dict with what the conversion should
    have produced from source's, bit for bit: expect is "same" (the source's
    values), "bfloat16"/"float16" (torch's own cast of the source, both
    round to nearest even), or "fp8" (the dequantized FP8 weights read from
    outdir's files, the source's values for every tensor left unquantized).
    The comparison is of float32 bit patterns, which holds every value of the
    narrower types exactly: a model that loaded the source's F32 weights
    instead of a variant's fails it."""
    ls = loaded.state_dict()
    ss = source.state_dict()
    deq = fp8_expected(outdir) if expect == "fp8" else {}
    bad = []
    fp8_bad = []
    n = 0
    for k, s in ss.items():
        if k not in ls:
            bad.append({"tensor": name + k, "detail": "missing after load"})
            continue
        l = ls[k]
        if expect in ("bfloat16", "float16") and s.is_floating_point():
            e = s.to(getattr(torch, expect))
        elif expect == "fp8" and k in deq:
            e, scale = deq[k]
            res["fp8_weights"] = res.get("fp8_weights", 0) + 1
            # the quantization itself, in float64: each value within half a
            # step of E4M3 of its source, 2^-4 of its magnitude for a normal
            # code and 2^-10 × scale (half the subnormal step) below
            err = (e.double() - s.double()).abs()
            tol = s.double().abs() * 2.0**-4 + scale.double() * 2.0**-10
            if bool((err > tol).any()):
                fp8_bad.append("%s%s: %d values off by more than half a step (max err %.3g)"
                               % (name, k, int((err > tol).sum()), err.max().item()))
        else:
            e = s
        n += 1
        if tuple(l.shape) != tuple(e.shape):
            bad.append({"tensor": name + k, "detail": "shape %s, want %s" % (tuple(l.shape), tuple(e.shape))})
            continue
        lb, eb = bits(l), bits(e)
        if lb.dtype != eb.dtype or not torch.equal(lb, eb):
            if l.is_floating_point():
                d = (l.float() - e.float()).abs()
                bad.append({"tensor": name + k, "detail": "%d of %d elements differ (max abs %.3g, loaded %s)"
                            % (int((lb != eb).sum()), l.numel(), d.max().item(), l.dtype)})
            else:
                bad.append({"tensor": name + k, "detail": "differs (loaded %s, want %s)" % (l.dtype, e.dtype)})
    res["compared"] = res.get("compared", 0) + n
    res["mismatches"] = res.get("mismatches", []) + bad
    res["fp8_out_of_bounds"] = res.get("fp8_out_of_bounds", []) + fp8_bad


def inputs_for(model):
    g = torch.Generator().manual_seed(1)
    if isinstance(model, transformers.CLIPVisionModel):
        return {"pixel_values": torch.randn(2, 3, 32, 32, generator=g)}
    ids = torch.randint(3, VOCAB, (2, 12), generator=g)
    if isinstance(model, transformers.T5ForConditionalGeneration):
        return {"input_ids": ids, "decoder_input_ids": ids[:, :6]}
    return {"input_ids": ids}


def output_of(model, inputs):
    with torch.no_grad():
        o = model(**{k: v for k, v in inputs.items()})
    t = o.logits if hasattr(o, "logits") and o.logits is not None else o.last_hidden_state
    return t.float()


def rel_error(o, r):
    return {"max_abs": (o - r).abs().max().item(), "ref_max": r.abs().max().item(),
            "rel": ((o - r).abs().max() / r.abs().max()).item(), "finite": bool(torch.isfinite(o).all())}


def loaded_dtypes(name, module, res):
    """Counts the dtypes of module's state dict as from_pretrained left it
    (before a forward pass, which makes compressed-tensors decompress)."""
    d = res.setdefault("dtypes", {}).setdefault(name or "model", {})
    for t in module.state_dict().values():
        k = str(t.dtype).replace("torch.", "")
        d[k] = d.get(k, 0) + 1


def quantizer(m, res):
    q = getattr(m, "hf_quantizer", None)
    res["quantizer"] = type(q).__name__ if q is not None else ""


def check_model(case, res):
    cls = getattr(transformers, case["class"])
    src = cls.from_pretrained(case["src"])
    kw = {}
    if case.get("variant"):
        kw["variant"] = case["variant"]
    m = cls.from_pretrained(case["out"], **kw)
    res["loaded"] = True
    res["class"] = type(m).__name__
    quantizer(m, res)
    loaded_dtypes("", m, res)
    inp = inputs_for(src)
    # the forward pass first: compressed-tensors keeps FP8 codes and scales
    # after from_pretrained and decompresses them on the first forward
    res["output"] = rel_error(output_of(m, inp), output_of(src, inp))
    compare("", m, src, case["expect"], case["out"], res)


def pipeline_images(p):
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        return torch.from_numpy(p("a photo of a cat", num_inference_steps=2, height=32, width=32,
                                  generator=g, output_type="np").images)


def check_pipeline(case, res):
    cls = getattr(diffusers, case["class"])
    src = cls.from_pretrained(case["src"])
    kw = {}
    if case.get("variant"):
        kw["variant"] = case["variant"]
    p = cls.from_pretrained(case["out"], **kw)
    res["loaded"] = True
    res["class"] = type(p).__name__
    for comp in sorted(case["components"]):
        loaded_dtypes(comp, getattr(p, comp), res)
    ids = src.tokenizer("a photo of a cat", padding="max_length", return_tensors="pt").input_ids
    with torch.no_grad():
        te = p.text_encoder(ids).last_hidden_state.float()
        te_ref = src.text_encoder(ids).last_hidden_state
    res["output"] = rel_error(te, te_ref)
    # the whole pipeline runs: 2 DDIM steps at 32×32, in float32 (exact for
    # the weights of every narrower type)
    p.to(torch.float32)
    img = pipeline_images(p)
    res["images"] = rel_error(img, pipeline_images(src))
    for comp, expect in sorted(case["components"].items()):
        compare(comp + "/", getattr(p, comp), getattr(src, comp), expect, os.path.join(case["out"], comp), res)


def check(cases_path, result_path):
    with open(cases_path) as f:
        cases = json.load(f)
    results = {}
    for case in cases:
        res = {"loaded": False}
        try:
            if case["lib"] == "diffusers":
                check_pipeline(case, res)
            else:
                check_model(case, res)
        except Exception as e:  # a load that fails is a result, not a crash
            res["error"] = "%s: %s" % (type(e).__name__, e)
            res["traceback"] = traceback.format_exc()[-4000:]
        results[case["name"]] = res
        print("%-28s %s" % (case["name"], "loaded" if res["loaded"] else "error: " + res.get("error", "")[:200]),
              file=sys.stderr)
    with open(result_path, "w") as f:
        json.dump(results, f, indent=1)


def versions():
    import accelerate
    import compressed_tensors
    import numpy
    import safetensors
    print("ecosystem env: torch %s, transformers %s, diffusers %s, compressed-tensors %s, accelerate %s, "
          "safetensors %s, numpy %s" % (torch.__version__, transformers.__version__, diffusers.__version__,
                                        compressed_tensors.__version__, accelerate.__version__,
                                        safetensors.__version__, numpy.__version__))


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2])
    elif sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "versions":
        versions()
    else:
        sys.exit("usage: eco.py build DIR | check CASES RESULT | versions")
