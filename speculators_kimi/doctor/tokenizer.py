"""The verifier's tokenizer files: ``prepare-data`` renders every conversation
with them and ``train`` loads them, while the weights load without them; a
checkpoint copied in part (``tokenizer_config.json`` but not the vocabulary it
reads) fails only there, deep in a traceback.

Reads file names only (no tokenizer is built, no remote code runs). A Hub id is
not checked (its files come with the model's), nor a directory with no tokenizer
at all (a weights-only layout, given its tokenizer elsewhere).
"""

from __future__ import annotations

from pathlib import Path

from .report import Problem, Report

__all__ = ["VOCABULARY_FILES", "tokenizer_section"]

#: The files a tokenizer reads its vocabulary from, by kind: the fast
#: tokenizers' JSON, SentencePiece, tiktoken (Kimi), BPE and WordPiece vocabularies.
VOCABULARY_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "spiece.model",
    "tiktoken.model",
    "vocab.json",
    "vocab.txt",
)


def tokenizer_section(verifier: str, report: Report) -> None:
    """A problem when a local verifier's ``tokenizer_config.json`` is there and
    no vocabulary file is."""
    path = Path(verifier)
    if not (path / "tokenizer_config.json").is_file():
        return
    names = {p.name for p in path.iterdir()}
    if names & set(VOCABULARY_FILES) or any(n.endswith(".tiktoken") for n in names):
        return
    report.problems.append(
        Problem(
            f"{verifier} has a tokenizer_config.json but no vocabulary file (none "
            f"of {', '.join(VOCABULARY_FILES)}): speculators prepare-data and train "
            "load the verifier's tokenizer and cannot.",
            "Copy the tokenizer files of the model's release into the checkpoint "
            "directory.",
        )
    )
