"""Random quantized blocks for the random-weight bench files (make-*-shape.py): written directly, with sane
scales, so that no F16 intermediate of a model's size is ever made."""
import numpy as np


def random_q4_0(rng, *shape):
    """Random Q4_0 blocks (scale 0.004) for a matrix (or stack) of NumPy shape `shape`, drawn from `rng`."""
    *lead, cols = shape
    nb = cols // 32
    blocks = rng.integers(0, 256, (*lead, nb, 18), dtype=np.uint8)
    blocks[..., :2] = np.full((*lead, nb, 1), np.float16(0.004)).view(np.uint8)
    return blocks.reshape(*lead, nb * 18)
