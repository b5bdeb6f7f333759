"""The task's vocabulary: 4 special tokens and 36 characters, as the paper's tokenizer has them."""

from __future__ import annotations

ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
PAD, BOS, EOS, SEP = 0, 1, 2, 3
SPECIAL = ("[PAD]", "[BOS]", "[EOS]", "[SEP]")
D_VOCAB = len(SPECIAL) + len(ALPHABET)  # 40
CHAR_ID = {c: i + len(SPECIAL) for i, c in enumerate(ALPHABET)}


def encode(s: str) -> list[int]:
    return [CHAR_ID[c] for c in s]


def decode(ids) -> list[str]:
    """Token ids -> readable labels ('[BOS]', 'a', ...), for plots and tables."""
    return [SPECIAL[i] if i < len(SPECIAL) else ALPHABET[i - len(SPECIAL)] for i in ids]
