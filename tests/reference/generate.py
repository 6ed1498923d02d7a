"""Regenerates every reference file in this folder from PyTorch (and BLEU's from sacrebleu).

    pip install torch safetensors numpy sacrebleu==2.6.0
    python3 tests/reference/generate.py

Each `gen_<family>.py` writes `<family>.safetensors`, or the file its `OUTPUT` names
(`gen_bleu.py`: `bleu_vectors.json`); the Rust tests read them without Python.
"""

import importlib
import pathlib
import sys

import torch

here = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(here))

for path in sorted(here.glob("gen_*.py")):
    module = importlib.import_module(path.stem)
    # Each file gets the same seed whether it is generated here or on its own.
    torch.manual_seed(0)
    output = getattr(module, "OUTPUT", path.stem[len("gen_"):] + ".safetensors")
    module.main(str(here / output))
