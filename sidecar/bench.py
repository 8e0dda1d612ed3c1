"""`zdict-sidecar bench codec`: per-message speed and ratio of the codec, next to native zstd.

Method (README, "Benchmarks"): one warm-up run discarded, then `runs` measured runs; each figure
is the median with [min-max]; every alternative is measured in the same process on the same
messages, so ratios between them are meaningful even on a noisy machine. The native reference is
the `zstd` CLI's own benchmark (`zstd -b -D`) on the same messages, one file per message.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import zstandard

from sidecar import __version__
from sidecar.codec import Decoder, Encoder, StaticResolver
from sidecar.dictionaries.training import TrainingParams, candidate_dictionary, split_ordered, train
from sidecar.errors import InputError
from sidecar.runtime import tune_gc

# zstd -b prints e.g. "3#10000 files : 1132741 -> 569876 (x1.988), 94.1 MB/s, 367.4 MB/s"
_ZSTD_BENCH_LINE = re.compile(
    r"(\d+) files\s*:\s*(\d+)\s*->\s*(\d+)\s*\(x?([\d.]+)\),\s*([\d.]+)\s*MB/s,\s*([\d.]+)\s*MB/s"
)


@dataclass(frozen=True, slots=True)
class Speed:
    """Messages per second: median and range over the measured runs."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, rates: Sequence[float]) -> Speed:
        return cls(statistics.median(rates), min(rates), max(rates))

    def __str__(self) -> str:
        return f"{self.median:,.0f} [{self.low:,.0f}-{self.high:,.0f}]"


@dataclass(slots=True)
class CodecResult:
    """One message set: sizes, ratio and the speeds of every path."""

    label: str
    messages: int
    mean_size: float
    dict_bytes: int
    level: int
    ratio_with_header: float
    ratio_frames_only: float
    nodict_ratio: float
    speeds: dict[str, Speed] = field(default_factory=dict)
    native: dict[str, Any] = field(default_factory=dict)


def _rates(fn: Callable[[], object], count: int, runs: int) -> Speed:
    rates = []
    for run in range(runs + 1):
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        if run:  # run 0 is the warm-up
            rates.append(count / elapsed)
    return Speed.of(rates)


def native_zstd_bench(values: Sequence[bytes], dict_data: bytes, level: int) -> dict[str, Any]:
    """`zstd -b` on one file per message with the dictionary: messages/s and ratio, native."""
    zstd = shutil.which("zstd")
    if zstd is None:
        raise InputError(
            "the zstd CLI is not installed (apt-get install zstd); it is the native reference"
        )
    with tempfile.TemporaryDirectory(prefix="zdict-bench-") as tmp:
        root = Path(tmp)
        (root / "dict").write_bytes(dict_data)
        msgs = root / "m"
        msgs.mkdir()
        for i, value in enumerate(values):
            (msgs / f"{i:06d}").write_bytes(value)
        level_args = [f"-b{level}"] if level >= 1 else ["-b", f"--fast={-level}"]
        result = subprocess.run(
            [zstd, *level_args, "-i1", "-D", str(root / "dict"), "-r", str(msgs)],
            capture_output=True,
            text=True,
            check=False,
        )
    matches = _ZSTD_BENCH_LINE.findall(result.stdout + result.stderr)
    if result.returncode != 0 or not matches:
        raise InputError(f"zstd -b failed (exit {result.returncode}): {result.stderr[-300:]}")
    files, raw, comp, _ratio, c_mbs, d_mbs = matches[-1]
    mean = int(raw) / int(files)
    return {
        "compress_msg_per_s": float(c_mbs) * 1e6 / mean,
        "decompress_msg_per_s": float(d_mbs) * 1e6 / mean,
        "ratio_frames_only": int(raw) / int(comp),
        "zstd_cli": subprocess.run([zstd, "-V"], capture_output=True, text=True).stdout.strip(),
    }


def bench_codec(
    label: str, values: Sequence[bytes], runs: int = 3, native_sample: int = 10_000
) -> CodecResult:
    """Train on the first 20% of `values`, then time every codec path on the other 80%."""
    samples = split_ordered(values, 0.2)
    # Default parameters, speed budget included: the dictionary and level a deployment would get.
    report = train(samples, TrainingParams(), namespace="bench")
    if report.chosen is None or report.dictionary is None or report.nodict is None:
        raise InputError(f"{label}: training failed: {report.reason}")
    level = report.chosen.level
    dictionary = candidate_dictionary(report.dictionary, level, "bench")
    heldout = samples.heldout
    records: list[tuple[bytes | None, None]] = [(v, None) for v in heldout]
    encoder = Encoder(dictionary, level=level)
    encoded = encoder.encode_batch(records)
    pairs = [(e.value, e.headers) for e in encoded]
    compressor = encoder._compressor()  # the same compressor the encoder uses, called directly
    decoder = Decoder(StaticResolver([dictionary]))
    n = len(heldout)
    batch: list[bytes | bytearray | memoryview] = list(heldout)
    result = CodecResult(
        label=label,
        messages=n,
        mean_size=samples.heldout_bytes / max(1, n),
        dict_bytes=len(dictionary.data),
        level=level,
        ratio_with_header=report.chosen.ratio,
        ratio_frames_only=samples.heldout_bytes / sum(len(compressor.compress(v)) for v in heldout),
        nodict_ratio=report.nodict.ratio,
    )
    result.speeds["encoder.encode_batch, default GC"] = _rates(
        lambda: encoder.encode_batch(records), n, runs
    )
    with tune_gc():
        result.speeds["encoder.encode_batch (relay path)"] = _rates(
            lambda: encoder.encode_batch(records), n, runs
        )
        result.speeds["encoder.encode (one call per record)"] = _rates(
            lambda: [encoder.encode(v) for v in heldout], n, runs
        )
        result.speeds["ZstdCompressor.compress loop"] = _rates(
            lambda: [compressor.compress(v) for v in heldout], n, runs
        )
        result.speeds["multi_compress_to_buffer (one C call)"] = _rates(
            lambda: compressor.multi_compress_to_buffer(batch), n, runs
        )
        result.speeds["decoder.decode"] = _rates(
            lambda: [decoder.decode(v, h) for v, h in pairs], n, runs
        )
    result.native = native_zstd_bench(heldout[:native_sample], dictionary.data, level)
    return result


def environment() -> dict[str, Any]:
    """Machine and versions, written into every benchmark's JSON."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "zdict_sidecar": __version__,
        "zstandard": zstandard.__version__,
        "libzstd": ".".join(map(str, zstandard.ZSTD_VERSION)),
    }


def result_dict(result: CodecResult) -> dict[str, Any]:
    data = asdict(result)
    data["speeds"] = {k: asdict(v) for k, v in result.speeds.items()}
    return data
