"""What the random-weight bench files (make-*-shape.py) share: a GGUF file whose tensors are declared first and drawn
only as they are written, one at a time, so that a file of a model's size streams to disk with no more than one
tensor in memory; quantized tensors are random blocks with sane scales, made directly (no F16 intermediate); the
stand-in tokenizer; the `[--layers N] OUT.gguf` command line; the vision towers' mmproj files (`write_mmproj`). Each
script keeps its own family's keys, tensor names and shapes, and its own seed, so the bytes of the file it writes are
those of the script alone."""
import os

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, TokenType
from gguf.quants import quant_shape_to_byte_shape, quantize

Q4_0, Q8_0, MXFP4 = GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q8_0, GGMLQuantizationType.MXFP4


def random_blocks(rng, qtype, shape):
    """Random blocks of `qtype` for a matrix (or stack) of NumPy shape `shape`, drawn from `rng`: Q4_0 with scale
    0.004, Q8_0 with scale 0.002 and quants in [-127, 127], MXFP4 with E8M0 exponents from 2^-9 to 2^-5."""
    *lead, cols = shape
    nb = cols // 32
    scale = lambda s: np.array([s], np.float16).view(np.uint8)
    if qtype == Q4_0:
        b = rng.integers(0, 256, (*lead, nb, 18), dtype=np.uint8)
        b[..., :2] = scale(0.004)
    elif qtype == Q8_0:
        b = np.empty((*lead, nb, 34), dtype=np.uint8)
        b[..., :2] = scale(0.002)
        b[..., 2:] = rng.integers(-127, 128, (*lead, nb, 32), dtype=np.int8).view(np.uint8)
    else:
        assert qtype == MXFP4, qtype
        b = rng.integers(0, 256, (*lead, nb, 17), dtype=np.uint8)
        b[..., 0] = rng.integers(118, 123, (*lead, nb), dtype=np.uint8)
    return b.reshape(quant_shape_to_byte_shape(shape, qtype))


def layers_and_out(args, layers):
    """The command line `[--layers N] OUT.gguf`: N (`layers` when not given) and OUT."""
    if args and args[0] == "--layers":
        layers, args = int(args[1]), args[2:]
    return layers, args[0]


class BenchFile:
    """A bench GGUF to be written to `out`: keys go to the GGUFWriter `w` (or `header`), tensors are declared in file
    order (with `add` or the kinds below) and drawn from `rng` by `write`."""

    def __init__(self, out, arch, seed):
        self.w = GGUFWriter(out, arch)
        self.rng = np.random.default_rng(seed)
        self.plan = []

    def header(self, name, file_type, vocab, pre, **keys):
        """general.name, then `keys` in the order given (`head_count=8` calls `w.add_head_count(8)`; None leaves the
        key out), the file type, and a stand-in gpt2 tokenizer of `vocab` distinct pieces (256 single characters,
        1024 of their pairs, then names) with a merge per pair, since llama.cpp refuses a gpt2 vocabulary without
        merges, and the pre-tokenizer `pre`. Benchmarks feed token ids, so nothing else is needed."""
        w = self.w
        w.add_name(name)
        for key, value in keys.items():
            if value is not None:
                getattr(w, "add_" + key)(value)
        w.add_file_type(file_type)
        pieces = [chr(0x100 + i) for i in range(256)]
        pairs = [(pieces[k // 32], pieces[k % 32]) for k in range(1024)]
        pieces += [a + b for a, b in pairs]
        pieces += [f"t{i}" for i in range(len(pieces), vocab)]
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(pieces)
        w.add_token_types([TokenType.NORMAL] * vocab)
        w.add_token_merges([f"{a} {b}" for a, b in pairs])
        w.add_bos_token_id(0)
        w.add_eos_token_id(1)

    def add(self, name, shape, dtype, make, qtype=None):
        """A tensor of NumPy shape `shape` and `dtype` (blocks of `qtype`: uint8, the shape in bytes) that `make()`
        gives when it is written."""
        dtype = np.dtype(dtype)
        self.w.add_tensor_info(name, shape, dtype, int(np.prod(shape)) * dtype.itemsize, raw_dtype=qtype)
        self.plan.append((tuple(shape), dtype, make))

    def blocks(self, qtype, name, *shape):
        """Random blocks of `qtype` for a matrix (or stack) of NumPy shape `shape`."""
        self.add(name, quant_shape_to_byte_shape(shape, qtype), np.uint8,
                 lambda: random_blocks(self.rng, qtype, shape), qtype)

    def q4_0(self, name, *shape):
        self.blocks(Q4_0, name, *shape)

    def q8_0(self, name, *shape):
        self.blocks(Q8_0, name, *shape)

    def mxfp4(self, name, *shape):
        self.blocks(MXFP4, name, *shape)

    def gaussian(self, name, *shape):
        """F32 with std 0.02 (routers, biases)."""
        self.add(name, shape, np.float32, lambda: (0.02 * self.rng.standard_normal(shape)).astype(np.float32))

    def f32(self, name, values):
        """Constant F32 values."""
        a = np.asarray(values, dtype=np.float32)
        self.add(name, a.shape, np.float32, lambda: a)

    def ones(self, name, *shape):
        self.f32(name, np.ones(shape))

    def zeros(self, name, *shape):
        self.f32(name, np.zeros(shape))

    def write(self):
        """The header, the keys, the tensor infos, then each tensor as it is drawn."""
        w = self.w
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for shape, dtype, make in self.plan:
            a = make()
            assert a.shape == shape and a.dtype == dtype, (a.shape, shape, a.dtype, dtype)
            w.write_tensor_data(a)
            del a
        w.close()


def write_mmproj(path, name, projector, seed, q8, vision_keys, tensors, draw, quantized):
    """A vision tower's mmproj file (`general.architecture` clip) at `path`: `projector`, GELU, the clip.vision.*
    keys `vision_keys` ((suffix, value) in order: a float as F32, an int as U32), mean and std 0.5, then `tensors`
    ((name, NumPy shape,
    kind) in file order) drawn by `draw(rng, shape, kind)` from `seed`: kinds 'matrix' and 'projection' are F16, or
    Q8_0 where `q8` and the name ends with one of `quantized` (gguf-py's quantizer, so the Q8_0 file holds the F16
    file's values quantized); the other kinds F32. Prints the file's size."""
    f = BenchFile(path, "clip", seed)
    w = f.w
    w.add_type("mmproj")
    w.add_name(name)
    w.add_file_type(7 if q8 else 1)  # MOSTLY_Q8_0 / MOSTLY_F16
    w.add_string("clip.projector_type", projector)
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.use_gelu", True)
    for key, value in vision_keys:
        (w.add_float32 if isinstance(value, float) else w.add_uint32)("clip.vision." + key, value)
    w.add_array("clip.vision.image_mean", [0.5] * 3)
    w.add_array("clip.vision.image_std", [0.5] * 3)
    total = 0
    for tensor, shape, kind in tensors:
        total += int(np.prod(shape))
        make = lambda shape=shape, kind=kind: draw(f.rng, shape, kind)
        if kind not in ("matrix", "projection"):
            f.add(tensor, shape, np.float32, make)
        elif q8 and tensor.endswith(quantized):
            byte_shape = (*shape[:-1], shape[-1] // 32 * 34)
            f.add(tensor, byte_shape, np.uint8, lambda make=make: quantize(make(), Q8_0), Q8_0)
        else:
            f.add(tensor, shape, np.float16, lambda make=make: make().astype(np.float16))
    f.write()
    print(f"wrote {path}: {len(tensors)} tensors, {total} params ({os.path.getsize(path) / 2**20:.0f} MiB)",
          flush=True)
