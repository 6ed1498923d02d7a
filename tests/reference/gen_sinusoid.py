"""Reference tables for the sinusoidal encoding's two layouts.

`fairseq/*`: fairseq's `SinusoidalPositionalEmbedding.get_embedding` (in posflow_torch), transcribed as its code
computes it (float32 tensors, the sines of every frequency, then the cosines, row 1 = the
padding index zeroed), and the rows a sequence's positions 0..len read: 2..len + 2 (fairseq's
`make_positions` counts from the padding index plus one). The ODE Transformer's and FLOATER's
translation code use this module. `interleaved/*`: Vaswani et al.'s formula in float64, posflow's
default layout."""

from common import save
from posflow_torch.encodings import fairseq_sinusoid as fairseq
from posflow_torch.encodings import interleaved_sinusoid as interleaved


def main(path):
    s = {}
    for length, d in [(40, 8), (300, 16)]:
        s[f"fairseq/{length}x{d}"] = fairseq(length, d)
        s[f"interleaved/{length}x{d}"] = interleaved(length, d)
    save(s, path)


if __name__ == "__main__":
    main("sinusoid.safetensors")
