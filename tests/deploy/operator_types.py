"""The Prometheus Operator's ServiceMonitor and PrometheusRule (monitoring.coreos.com/v1), as
strict pydantic models, for the tests of deploy/k8s.

Written from the operator's API types (pkg/apis/monitoring/v1, v0.95): field names, types,
required fields, and the enums and patterns its CRDs declare (the API server enforces those when
the CRDs are installed). Every model forbids unknown fields, so a misspelt one (`jobLable`) is an
error, as it is for the operator's strict decoding; and types are strict: a number is not
accepted where the API has a string, nor the reverse.

Only part of the API is modelled: the fields deploy/k8s uses and their close neighbours. A field
the API has but these models lack is refused like a misspelt one: add it here, from the API,
when a manifest needs it. Not modelled at all: TLS, authorization, OAuth2, proxies and
the rest of the HTTP client settings of an endpoint; scrape class and limits beyond the
sample, target and label limits.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: The operator's `Duration`: Prometheus's duration syntax, `0`, or empty.
Duration = Annotated[
    str,
    Field(
        pattern=r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
        r"(([0-9]+)ms)?)$"
    ),
]
#: The operator's `NonEmptyDuration`.
NonEmptyDuration = Annotated[Duration, Field(min_length=1)]
NonNegative = Annotated[int, Field(ge=0)]

RelabelAction = Literal[
    "replace",
    "Replace",
    "keep",
    "Keep",
    "drop",
    "Drop",
    "hashmod",
    "HashMod",
    "labelmap",
    "LabelMap",
    "labeldrop",
    "LabelDrop",
    "labelkeep",
    "LabelKeep",
    "lowercase",
    "Lowercase",
    "uppercase",
    "Uppercase",
    "keepequal",
    "KeepEqual",
    "dropequal",
    "DropEqual",
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ObjectMeta(Strict):
    """The part of Kubernetes' ObjectMeta a manifest sets (the server fills in the rest)."""

    name: Annotated[str, Field(min_length=1)]
    namespace: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class LabelSelectorRequirement(Strict):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = []


class LabelSelector(Strict):
    matchLabels: dict[str, str] = {}
    matchExpressions: list[LabelSelectorRequirement] = []


class NamespaceSelector(Strict):
    any: bool = False
    matchNames: list[str] = []


class RelabelConfig(Strict):
    sourceLabels: list[str] = []
    separator: str | None = None
    targetLabel: str = ""
    regex: str = ""
    modulus: NonNegative = 0
    replacement: str | None = None
    action: RelabelAction = "replace"


class Endpoint(Strict):
    """One scrape endpoint of a ServiceMonitor."""

    port: str = ""
    targetPort: int | str | None = None
    path: str = ""
    scheme: Literal["http", "https", "HTTP", "HTTPS"] | None = None
    params: dict[str, list[str]] = {}
    interval: Duration = ""
    scrapeTimeout: Duration = ""
    honorLabels: bool = False
    honorTimestamps: bool | None = None
    trackTimestampsStaleness: bool | None = None
    metricRelabelings: list[RelabelConfig] = []
    relabelings: list[RelabelConfig] = []
    filterRunning: bool | None = None

    @model_validator(mode="after")
    def _one_port(self) -> Endpoint:
        if self.port and self.targetPort is not None:
            raise ValueError("port and targetPort are mutually exclusive")
        return self


class ServiceMonitorSpec(Strict):
    jobLabel: str = ""
    targetLabels: list[str] = []
    podTargetLabels: list[str] = []
    endpoints: list[Endpoint]
    selector: LabelSelector
    selectorMechanism: Literal["RelabelConfig", "RoleSelector"] | None = None
    namespaceSelector: NamespaceSelector = NamespaceSelector()
    sampleLimit: NonNegative | None = None
    targetLimit: NonNegative | None = None
    labelLimit: NonNegative | None = None
    labelNameLengthLimit: NonNegative | None = None
    labelValueLengthLimit: NonNegative | None = None
    serviceDiscoveryRole: Literal["Endpoints", "EndpointSlice"] | None = None


class ServiceMonitor(Strict):
    apiVersion: Literal["monitoring.coreos.com/v1"]
    kind: Literal["ServiceMonitor"]
    metadata: ObjectMeta
    spec: ServiceMonitorSpec


class Rule(Strict):
    """A recording rule (`record`) or an alerting rule (`alert`), exactly one of the two."""

    record: str = ""
    alert: str = ""
    expr: int | str
    for_: Duration | None = Field(default=None, alias="for")
    keep_firing_for: NonEmptyDuration | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}

    @model_validator(mode="after")
    def _record_or_alert(self) -> Rule:
        if bool(self.record) == bool(self.alert):
            raise ValueError("a rule has exactly one of record and alert")
        return self


class RuleGroup(Strict):
    name: Annotated[str, Field(min_length=1)]
    labels: dict[str, str] = {}
    interval: Duration | None = None
    query_offset: Duration | None = None
    rules: list[Rule] = []
    partial_response_strategy: Annotated[str, Field(pattern=r"^(?i)(abort|warn)?$")] = ""
    limit: int | None = None


class PrometheusRuleSpec(Strict):
    groups: list[RuleGroup] = []


class PrometheusRule(Strict):
    apiVersion: Literal["monitoring.coreos.com/v1"]
    kind: Literal["PrometheusRule"]
    metadata: ObjectMeta
    spec: PrometheusRuleSpec


OPERATOR_KINDS: dict[str, type[ServiceMonitor | PrometheusRule]] = {
    "ServiceMonitor": ServiceMonitor,
    "PrometheusRule": PrometheusRule,
}


def decode(document: dict[str, Any]) -> ServiceMonitor | PrometheusRule:
    """`document` as the operator resource its `kind` names.

    Raises:
        ValueError: an unknown kind; pydantic.ValidationError (a ValueError) naming every field
            that is unknown, missing, of the wrong type or out of its enum or pattern.
    """
    model = OPERATOR_KINDS.get(str(document.get("kind")))
    if model is None:
        raise ValueError(f"kind {document.get('kind')!r} is not a Prometheus Operator resource")
    return model.model_validate(document)
