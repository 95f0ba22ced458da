"""Prepared datasets are read in torch format, whatever format they were saved in."""

import pytest
import torch
from datasets import Dataset as HFDataset
from safetensors.torch import save_file

from speculators.train.data import (
    ArrowDataset,
    build_client_item,
    load_prepared_dataset,
)

TOKENS = [[5, 6, 7, 8], [9, 10, 11]]


@pytest.fixture(params=["python", "torch"])
def prepared(tmp_path, request):
    """A prepared dataset saved as plain lists (another pipeline's output) or in
    torch format (``prepare-data``'s), with the first row's hidden states."""
    rows = HFDataset.from_dict(
        {
            "input_ids": TOKENS,
            "loss_mask": [[0, 1, 1, 1], [0, 0, 1]],
            "seq_len": [len(ids) for ids in TOKENS],
        }
    )
    if request.param == "torch":
        rows.set_format("torch")
    rows.save_to_disk(str(tmp_path))
    (tmp_path / "hidden_states").mkdir()
    save_file(
        {
            "hidden_states": torch.randn(4, 4, 8),
            "token_ids": torch.tensor(TOKENS[0]),
        },
        str(tmp_path / "hidden_states" / "hs_0.safetensors"),
    )
    return tmp_path


def test_rows_are_tensors(prepared):
    row = load_prepared_dataset(prepared)[1]
    assert isinstance(row["input_ids"], torch.Tensor)
    assert row["input_ids"].tolist() == TOKENS[1]


def test_offline_generation_request(prepared):
    """``generate-offline-data``'s request: the row's token ids as a list."""
    item = build_client_item(load_prepared_dataset(prepared)[1])
    assert item["input_ids"] == TOKENS[1]


def test_training_reads_a_sample(prepared):
    dataset = ArrowDataset(max_len=16, datapath=prepared, on_missing="skip")
    sample = dataset[0]
    assert isinstance(sample, dict), sample
    assert sample["input_ids"].tolist() == TOKENS[0]
    assert sample["loss_mask"].tolist() == [0, 1, 1, 1]
    assert sample["hidden_states"].shape == (4, 24)
