"""The failure signatures as data: ``healthchecks/failure-signatures.yaml``.

The shipped file loads, names only known classes and says why for each entry; order
decides between entries that both match; a malformed file fails with one line per problem
that names the file and the entry; ``$SERVEFLEET_HEALTHCHECKS`` points the parser elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from servefleet.core.bootlog import FailureClass
from servefleet.core.bootlog.failures import (
    HEALTHCHECKS_ENV,
    SIGNATURES_FILE,
    SignatureEntry,
    SignatureTable,
    classify,
    healthchecks_dir,
    load_entries,
    load_signatures,
    signature_table,
)
from servefleet.core.errors import ConfigError

F = FailureClass
REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "healthchecks" / SIGNATURES_FILE


@pytest.fixture
def fresh_table() -> Iterator[None]:
    """Forget the cached table before and after the test (it is read once per process)."""
    signature_table.cache_clear()
    yield
    signature_table.cache_clear()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / SIGNATURES_FILE
    path.write_text(text)
    return path


def matching_entries(entries: tuple[SignatureEntry, ...], text: str) -> list[int]:
    """Indexes of the entries that match ``text`` on their own."""
    hits = []
    for index, entry in enumerate(entries):
        if SignatureTable.build((entry,)).match(text) is not None:
            hits.append(index)
    return hits


# -- the shipped file ----------------------------------------------------------------------

def test_the_folder_is_the_repository_healthchecks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HEALTHCHECKS_ENV, raising=False)
    assert healthchecks_dir() == REPO / "healthchecks"
    assert (healthchecks_dir() / SIGNATURES_FILE).is_file()


def test_the_shipped_file_loads() -> None:
    entries = load_entries(SHIPPED)
    assert len(entries) >= 11
    assert signature_table().signatures, "the parser's table is empty"


def test_every_class_is_known_and_every_class_has_a_signature() -> None:
    raw = yaml.safe_load(SHIPPED.read_text())
    known = {cls.value for cls in FailureClass}
    named = [entry["class"] for entry in raw]
    assert set(named) <= known, set(named) - known
    # "other" is what matches nothing; every other class must be reachable from a line.
    assert set(named) == known - {F.OTHER.value}


def test_every_entry_says_why_in_one_line() -> None:
    raw = yaml.safe_load(SHIPPED.read_text())
    for index, entry in enumerate(raw):
        why = entry.get("why")
        assert isinstance(why, str) and why.strip(), f"entry {index} has no why"
        assert "\n" not in why.strip(), f"entry {index}: why spans several lines"


def test_every_substring_reaches_its_own_class() -> None:
    """No entry is dead: each literal, alone, is classified as its entry says (an earlier
    entry of another class that also matched it would shadow it)."""
    table = signature_table()
    for index, entry in enumerate(load_entries(SHIPPED)):
        samples = list(entry.any_of or ())
        if entry.all_of:
            samples.append(" ".join(entry.all_of))
        if entry.regex is not None:
            continue
        for sample in samples:
            assert table.match(sample) is entry.failure_class, (index, sample)


def test_a_line_that_matches_two_entries_gets_the_first() -> None:
    entries = load_entries(SHIPPED)
    line = "torch.OutOfMemoryError: CUDA error: out of memory"
    hits = matching_entries(entries, line)
    assert len(hits) >= 2, hits
    first, second = entries[hits[0]].failure_class, entries[hits[1]].failure_class
    assert (first, second) == (F.CUDA_OOM, F.GPU_RUNTIME_ERROR)
    assert classify(line) is F.CUDA_OOM


def test_the_context_stays_in_code() -> None:
    """The same out-of-memory line: in KV allocation, during capture, elsewhere."""
    line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert classify(line) is F.CUDA_OOM
    assert classify(line, kv_alloc=True) is F.KV_CACHE_OOM
    assert classify(line, capturing=True) is F.CUDAGRAPH_CAPTURE_FAILED
    assert classify("RuntimeError: something else", capturing=True) is F.CUDAGRAPH_CAPTURE_FAILED
    assert classify("RuntimeError: something else") is F.OTHER


# -- order and conditions, on small files ---------------------------------------------------

TWO = """\
- class: {first}
  why: test
  any: ["shared needle"]
- class: {second}
  why: test
  any: ["shared"]
"""


@pytest.mark.parametrize(("first", "second"), [
    (F.CUDA_OOM, F.GPU_RUNTIME_ERROR),
    (F.GPU_RUNTIME_ERROR, F.CUDA_OOM),
])
def test_file_order_decides(tmp_path: Path, first: FailureClass, second: FailureClass) -> None:
    table = load_signatures(write(tmp_path, TWO.format(first=first.value, second=second.value)))
    assert table.match("Error: shared needle here") is first
    assert table.match("Error: shared only") is second
    assert table.match("Error: nothing") is None


def test_all_conditions_of_an_entry_must_hold(tmp_path: Path) -> None:
    table = load_signatures(write(tmp_path, """\
- class: unsupported_quantization_or_dtype
  why: test
  any: ["float16"]
  all: ["dtype", "GPU"]
  regex: '(?i)float16[^.]*unsupported'
"""))
    cls = F.UNSUPPORTED_QUANTIZATION_OR_DTYPE
    assert table.match("dtype float16 UNSUPPORTED on this GPU") is cls
    assert table.match("dtype float16 unsupported on this card") is None  # no "GPU"
    assert table.match("dtype float16. unsupported on this GPU") is None  # regex fails
    assert table.match("dtype FLOAT16 unsupported on this GPU") is None  # no literal


def test_a_regex_without_literals_is_still_searched(tmp_path: Path) -> None:
    """The fast pre-scan must not hide an entry that has no literal to pre-scan for."""
    table = load_signatures(write(tmp_path, """\
- class: gpu_runtime_error
  why: test
  any: ["CUDA error"]
- class: cuda_oom
  why: test
  regex: '(?i)\\boom\\b'
"""))
    assert table.needles == ("CUDA error",)
    assert table.match("RuntimeError: killed by the OOM killer") is F.CUDA_OOM
    assert table.match("RuntimeError: CUDA error: oom") is F.GPU_RUNTIME_ERROR
    assert table.match("RuntimeError: zoom") is None


# -- malformed files ------------------------------------------------------------------------

GOOD = "- class: cuda_oom\n  why: test\n  any: [\"out of memory\"]\n"


@pytest.mark.parametrize(("entry", "message"), [
    ("- class: cuda_oops\n  why: test\n  any: [x]\n",
     "entry 1: class: unknown failure class 'cuda_oops' (known: "),
    ("- class: cuda_oom\n  why: test\n  anyy: [x]\n",
     "entry 1: unknown key 'anyy' (allowed: class, why, any, all, regex)"),
    ("- class: cuda_oom\n  any: [x]\n", "entry 1: why: required key is missing"),
    ("- class: cuda_oom\n  why: '  '\n  any: [x]\n",
     "entry 1: why: must say where the strings come from"),
    ("- class: cuda_oom\n  why: test\n", "entry 1: needs at least one of any, all, regex"),
    ("- class: cuda_oom\n  why: test\n  any: []\n", "entry 1: any: must list at least one"),
    ("- class: cuda_oom\n  why: test\n  all: [a, '']\n", "entry 1: all: an empty substring"),
    ("- class: cuda_oom\n  why: test\n  any: [a, 3]\n", "entry 1: any[1]: Input should be a"),
    ("- class: cuda_oom\n  why: test\n  regex: '(unclosed'\n",
     "entry 1: regex: not a valid regular expression"),
    ("- just a string\n", "entry 1: expected a mapping with keys class, why, any, all, regex"),
])
def test_a_malformed_entry_names_the_file_and_the_entry(
    tmp_path: Path, entry: str, message: str
) -> None:
    path = write(tmp_path, GOOD + entry)
    with pytest.raises(ConfigError) as caught:
        load_entries(path)
    assert len(caught.value.problems) == 1, caught.value.problems
    assert caught.value.problems[0].startswith(f"{path}: {message}"), caught.value.problems


def test_every_bad_entry_is_reported(tmp_path: Path) -> None:
    path = write(tmp_path, "- class: nope\n  why: a\n  any: [x]\n" + GOOD
                 + "- class: cuda_oom\n  why: b\n  regexp: x\n")
    with pytest.raises(ConfigError) as caught:
        load_entries(path)
    assert [p.split(": ")[1] for p in caught.value.problems] == ["entry 0", "entry 2"]


@pytest.mark.parametrize(("text", "message"), [
    ("", "expected a non-empty list of signatures"),
    ("class: cuda_oom\n", "expected a non-empty list of signatures"),
    ("- class: cuda_oom\n  why: a\n  any: [x]\n  any: [y]\n", "key 'any' appears twice"),
])
def test_a_malformed_file_is_refused(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=str(path)) as caught:
        load_entries(path)
    assert message in str(caught.value)


# -- the folder from the environment --------------------------------------------------------

def test_the_environment_names_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_table: None
) -> None:
    write(tmp_path, "- class: model_load_failed\n  why: test\n  any: [\"CUDA out of memory\"]\n")
    monkeypatch.setenv(HEALTHCHECKS_ENV, str(tmp_path))
    assert healthchecks_dir() == tmp_path
    assert classify("torch.OutOfMemoryError: CUDA out of memory.") is F.MODEL_LOAD_FAILED


def test_a_malformed_file_from_the_environment_fails_the_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_table: None
) -> None:
    write(tmp_path, GOOD + "- class: nope\n  why: test\n  any: [x]\n")
    monkeypatch.setenv(HEALTHCHECKS_ENV, str(tmp_path))
    with pytest.raises(ConfigError, match=r"failure-signatures\.yaml: entry 1: class: unknown"):
        classify("ValueError: anything")


def test_a_missing_file_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_table: None
) -> None:
    monkeypatch.setenv(HEALTHCHECKS_ENV, str(tmp_path / "absent"))
    with pytest.raises(ConfigError) as caught:
        classify("ValueError: anything")
    text = str(caught.value)
    assert str(tmp_path / "absent" / SIGNATURES_FILE) in text
    assert HEALTHCHECKS_ENV in text
