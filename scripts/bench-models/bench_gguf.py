"""What the random-weight bench files (make-*-shape.py) share: a GGUF file whose tensors are declared first and drawn
only as they are written, one at a time, so that a file of a model's size streams to disk with no more than one
tensor in memory; quantized tensors are random blocks with sane scales, made directly (no F16 intermediate); the
stand-in tokenizer; the `[--layers N] OUT.gguf` command line. Each script keeps its own family's keys, tensor names
and shapes, and its own seed, so the bytes of the file it writes are those of the script alone."""
import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, TokenType
from gguf.quants import quant_shape_to_byte_shape

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
