"""deploy/reference.py: sidecar/REFERENCE.md, the settings and metrics generated from their code."""

from __future__ import annotations

from pathlib import Path

from deploy.reference import PAGE, main, page
from sidecar.config import environment_variables

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_reference_is_what_the_code_generates() -> None:
    assert PAGE.read_text(encoding="utf-8") == page(), "run `make reference`"


def test_every_setting_and_every_defined_metric_family_has_a_row() -> None:
    text = page()
    for name, _ in environment_variables():
        assert f"| `{name.rpartition('__')[2]}` |" in text
    for family in (
        "zdict_records_total",
        "zdict_stored_without_sidecar_bytes_total",
        "zdict_proxy_fetch_records_total",
        "zdict_producer_output_mode",
        "zdict_build_info",
    ):
        assert text.count(f"| `{family}` |") == 1, family


def test_a_metrics_labels_and_type_are_in_its_row() -> None:
    text = page()
    assert "| `zdict_records_total` | counter | topic, op, outcome |" in text
    assert "| `zdict_producer_encode_duration_seconds` | summary | topic |" in text
    assert "| `zdict_build_info` | info | version, python, zstandard," in text


def test_a_choice_setting_keeps_its_bar_inside_the_cell() -> None:
    assert "(auto\\|frames, default auto) |" in page()


def test_settings_are_grouped_by_section_the_top_level_ones_first() -> None:
    text = page()
    assert text.index("### Top level") < text.index("### `ZDICT_CODEC__…`")
    assert "| `DICTIONARIES` |" not in text and "| `ZDICT_DICTIONARIES` |" in text
    assert "| `KAFKA_BOOTSTRAP_SERVERS` |" in text
    kafka = text.index("### `ZDICT_KAFKA__…`")
    assert text.index("| `<PROPERTY>` |", kafka) < text.index("### `ZDICT_CONSUMER__…`")


def test_main_writes_the_page(tmp_path: Path) -> None:
    out = tmp_path / "REFERENCE.md"
    assert main(["--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == page()
