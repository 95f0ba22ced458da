import json

import pytest

from speculators.data_generation.input_files import (
    DataFileError,
    NoSamplesError,
    find_fault,
    utf8_fault,
)
from speculators.data_generation.preprocessing import load_raw_dataset
from speculators.utils.cli_errors import TRACEBACK_ENV, known_error_message
from tests.unit.mock.chat_tokenizers import write_kimi_tokenizer
from tests.unit.mock.local_prepare_data import run_prepare_data

ROW = json.dumps(
    {
        "conversations": [
            {"role": "user", "content": "what is two plus two"},
            {"role": "assistant", "content": "four"},
        ]
    }
)
GOOD = (ROW + "\n") * 6
# Line 7 parses as JSON, but its reply holds a byte that is not UTF-8 (0xff at
# byte offset len(GOOD) + 2 + ROW.index("four")): datasets loads such a file.
NOT_UTF8 = GOOD.encode() + ROW.encode().replace(b"four", b"fo\xffur") + b"\n"
NOT_UTF8_SAYS = (
    f"line 7, byte offset {len(GOOD) + ROW.index('four') + 2}: not UTF-8 text "
    "(byte 0xff; save the file as UTF-8)"
)

# (file name, content, what the one-line error must say)
BAD_FILES = [
    ("empty.jsonl", b"", "the file is empty"),
    ("blank.jsonl", b"\n  \n", "the file is empty"),
    (
        "truncated.jsonl",
        (GOOD + ROW[:30]).encode(),
        (
            "line 7, column 29: not valid JSON (Unterminated string starting at); "
            "the last line, without a newline: was the file cut short?"
        ),
    ),
    (
        "broken.jsonl",
        (GOOD + "{not json}\n" + GOOD).encode(),
        "line 7, column 2: not valid JSON",
    ),
    (
        "utf16.jsonl",
        ROW.encode("utf-16") + b"\n",
        "line 1, byte offset 0: not UTF-8 text (byte 0xff",
    ),
    ("not_utf8.jsonl", NOT_UTF8, NOT_UTF8_SAYS),
    ("not_utf8.json", b'[\n{"a": "\xc3"}\n]', "line 2, byte offset 9: not UTF-8"),
    ("document.json", b'{"a": 1,\n "b": }', "line 2, column 7: not valid JSON"),
]


@pytest.fixture(scope="module")
def kimi_dir(tmp_path_factory):
    pytest.importorskip("tiktoken")
    return write_kimi_tokenizer(tmp_path_factory.mktemp("kimi"))


def _prepare_data(monkeypatch, model, data, out) -> int | str | None:
    """``speculators prepare-data`` in this process: its exit status."""
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    return run_prepare_data(monkeypatch, model, data, out)


@pytest.mark.parametrize(("name", "content", "says"), BAD_FILES)
def test_bad_local_file_is_named_with_its_line(tmp_path, name, content, says):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataFileError) as exc_info:
        load_raw_dataset(str(path))
    message = str(exc_info.value)
    assert message.startswith(f"{path}: ")
    assert says in message
    assert known_error_message(exc_info.value) == f"DataFileError: {message}"


def test_bad_file_in_a_directory_is_the_one_named(tmp_path):
    (tmp_path / "a.jsonl").write_text(GOOD)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.jsonl").write_text(GOOD + ROW[:-1] + "\n")
    with pytest.raises(DataFileError, match=r"sub/b\.jsonl: line 7, column"):
        load_raw_dataset(str(tmp_path))


def test_missing_file_is_named_without_a_traceback(tmp_path):
    path = tmp_path / "missing.jsonl"
    with pytest.raises(DataFileError, match=f"--data {path}: the file does not exist"):
        load_raw_dataset(str(path))


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 7, 1 << 20])
def test_utf8_fault_counts_lines_and_bytes_across_chunks(tmp_path, chunk_size):
    text = "héllo\n€ 𝄞\n"
    path = tmp_path / "rows.jsonl"
    path.write_bytes(text.encode() * 3)
    assert utf8_fault(path, chunk_size) is None
    path.write_bytes(text.encode() * 3 + "ok €".encode() + b"\xe2\x82")
    offset = len(text.encode()) * 3 + len("ok €".encode())
    assert utf8_fault(path, chunk_size) == (
        f"line 7, byte offset {offset}: not UTF-8 text "
        "(byte 0xe2; save the file as UTF-8)"
    )


def test_readable_files_have_no_fault_and_load(tmp_path):
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text(GOOD + "\n")
    document = tmp_path / "rows.json"
    document.write_text(json.dumps([json.loads(ROW)] * 2))
    assert find_fault(jsonl) is None
    assert find_fault(document) is None
    assert len(load_raw_dataset(str(jsonl))[0]) == 6
    assert len(load_raw_dataset(str(document))[0]) == 2


@pytest.mark.parametrize(
    "row",
    [
        {"conversations": [{"role": "user", "content": "no answer"}]},
        {"messages": [{"role": "user", "content": "hi"}]},
    ],
    ids=["no-assistant-turn", "wrong-field"],
)
def test_prepare_data_without_samples_is_one_line(
    kimi_dir, tmp_path, monkeypatch, capsys, row
):
    data = tmp_path / "data.jsonl"
    data.write_text((json.dumps(row) + "\n") * 3)
    out = tmp_path / "out"
    assert _prepare_data(monkeypatch, kimi_dir, data, out) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-2].startswith(
        f"error: {NoSamplesError.__name__}: No samples remain after preprocessing "
        f"{data} (see the warnings above)"
    )
    assert "Traceback" not in "\n".join(err)
    assert not list(out.glob("*.arrow"))


@pytest.mark.parametrize(
    "bad",
    [
        (
            (GOOD + ROW[:30]).encode(),
            (
                "line 7, column 29: not valid JSON (Unterminated string starting "
                "at); the last line, without a newline: was the file cut short?"
            ),
        ),
        (NOT_UTF8, NOT_UTF8_SAYS),
    ],
    ids=["truncated", "not-utf8"],
)
def test_prepare_data_with_a_bad_file_is_one_line(
    kimi_dir, tmp_path, monkeypatch, capsys, bad
):
    content, says = bad
    data = tmp_path / "data.jsonl"
    data.write_bytes(content)
    assert _prepare_data(monkeypatch, kimi_dir, data, tmp_path / "out") == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-2:] == [
        (
            f"error: DataFileError: {data}: {says}; "
            "fix or remove it, or pass another --data"
        ),
        f"(set {TRACEBACK_ENV}=1 to see the traceback)",
    ]
