"""The PromQL checker the monitoring tests rely on: names, conditions, template variables."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sidecar.metrics import Metrics
from tests.deploy.promql import (
    Query,
    dashboard_queries,
    exported_names,
    metric_names,
    strip_conditions,
    substitute,
    unknown_metrics,
)


def _exported() -> set[str]:
    return exported_names(generate_latest(Metrics(CollectorRegistry()).registry).decode())


def test_metric_names_skip_functions_keywords_label_lists_durations_and_strings() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le) "
        '(rate(zdict_codec_batch_duration_seconds_bucket{ns=~"a|b"}'
        "[5m] offset 1m))) / on (namespace) group_left (dict_id) zdict_dictionary_info"
        ' and label_replace(up, "x", "$1", "job", "(.*)") > bool 1e3'
    )
    assert metric_names(expr) == {
        "zdict_codec_batch_duration_seconds_bucket",
        "zdict_dictionary_info",
        "up",
    }


def test_a_made_up_metric_in_a_panel_is_reported_with_the_panel() -> None:
    dashboard = {
        "panels": [
            {
                "title": "Ratio",
                "targets": [
                    {"refId": "A", "expr": "sum(rate(zdict_input_bytes_total[5m]))"},
                    {"refId": "B", "expr": "sum(rate(zdict_saved_bytes_total[5m]))"},
                ],
            }
        ]
    }
    assert unknown_metrics(dashboard_queries(dashboard), _exported()) == {
        "panel 'Ratio' B": {"zdict_saved_bytes_total"}
    }


def test_a_misspelt_histogram_series_is_reported() -> None:
    query = Query(
        "x", "histogram_quantile(0.5, rate(zdict_codec_batch_duration_seconds_buckets[1m]))"
    )
    assert unknown_metrics([query], _exported()) == {
        "x": {"zdict_codec_batch_duration_seconds_buckets"}
    }


def test_exported_names_include_families_without_samples_and_histogram_series() -> None:
    names = _exported()
    # no produce error happened, yet the family is declared and so exported, with the time
    # each of its series is created
    assert {"zdict_produce_errors_total", "zdict_produce_errors_created"} <= names
    assert {
        "zdict_codec_batch_duration_seconds_bucket",
        "zdict_codec_batch_duration_seconds_count",
    } <= names
    assert {"zdict_build_info", "zdict_dictionary_info", "process_start_time_seconds"} <= names


@pytest.mark.parametrize(
    ("condition", "series"),
    [
        ('up{job="zdict-sidecar"} == 0', 'up{job="zdict-sidecar"}'),
        ("changes(x[30m]) > 2", "changes(x[30m])"),
        (
            "(changes(x[2m]) > 0) * on (a) group_left (b) y",
            "(changes(x[2m])) * on (a) group_left (b) y",
        ),
        ("a > 10000\nand deriv(a[15m]) > 0", "a\nand deriv(a[15m])"),
        ("(time() - max(x)) / 86400 > 7", "(time() - max(x)) / 86400"),
        ("r / on (namespace) h < 0.8", "r / on (namespace) h"),
        ('increase(x{result="failed"}[6h]) >= 3', 'increase(x{result="failed"}[6h])'),
        ('m{code!="500"} > bool 1.5e2', 'm{code!="500"}'),
        ('absent(up{job="zdict-sidecar"} == 1)', '(up{job="zdict-sidecar"})'),
        (
            "(time() - max_over_time(x_created[15m])) < 900",
            "(time() - max_over_time(x_created[15m]))",
        ),
    ],
)
def test_strip_conditions_removes_comparisons_against_numbers(condition: str, series: str) -> None:
    assert strip_conditions(condition) == series


def test_strip_conditions_refuses_a_comparison_of_two_vectors() -> None:
    with pytest.raises(ValueError, match="EXPRESSION OP NUMBER"):
        strip_conditions("live < 0.8 * heldout")


def test_substitute_replaces_every_variable_form_and_refuses_an_unknown_one() -> None:
    values = {"namespace": "orders", "__rate_interval": "10s"}
    assert (
        substitute(
            'rate(x{ns=~"$namespace"}[$__rate_interval]) + y{a="${namespace:regex}"}', values
        )
        == 'rate(x{ns=~"orders"}[10s]) + y{a="orders"}'
    )
    with pytest.raises(KeyError, match=r"\$instance"):
        substitute('x{i="$instance"}', values)


def test_template_variables_are_not_taken_for_metric_names() -> None:
    expr = "sum(rate(zdict_input_bytes_total[5m])) / 1e9 * $retention_days * ${replicas}"
    assert metric_names(expr) == {"zdict_input_bytes_total"}
